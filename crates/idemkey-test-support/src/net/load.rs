//! Clients that retry each key until it is created, and what they were answered: the load of
//! the fault tests that restart or kill what sits under `idemkey serve`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::process::notes::ALICE;

/// What the clients were answered: key → the note id of its 201, and how many answers were
/// not 201 (or connections refused), which shows a fault was felt.
#[derive(Clone, Default)]
pub struct Receipts {
    /// Each created key's note id.
    pub ids: Arc<Mutex<BTreeMap<String, String>>>,
    /// How many answers were not 201, or connections refused or cut.
    pub setbacks: Arc<AtomicUsize>,
}

impl Receipts {
    /// How many keys are created.
    pub fn created(&self) -> usize {
        self.ids.lock().unwrap().len()
    }

    /// How many answers were not 201 so far.
    pub fn setbacks(&self) -> usize {
        self.setbacks.load(Ordering::Relaxed)
    }

    /// Each created key's note id, now.
    pub fn snapshot(&self) -> BTreeMap<String, String> {
        self.ids.lock().unwrap().clone()
    }

    /// Waits until at least `n` keys are created.
    pub async fn wait_for(&self, n: usize) {
        while self.created() < n {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// Sends `key` (titled `key`) to `POST {base}/v1/notes` until it is answered 201; every other
/// answer in `retried` (and a refused or cut connection) is retried after 50 ms.
pub async fn until_created(
    client: &reqwest::Client,
    bases: &[String],
    key: &str,
    retried: &[u16],
    receipts: &Receipts,
) {
    let deadline = Instant::now() + Duration::from_secs(90);
    let body = format!("{{\"title\":\"{key}\"}}");
    for attempt in 0.. {
        assert!(Instant::now() < deadline, "{key} was never created");
        // Each attempt goes to the next instance, as a load balancer would send a retry.
        let base = &bases[attempt % bases.len()];
        let sent = client
            .post(format!("{base}/v1/notes"))
            .header("authorization", format!("Bearer {ALICE}"))
            .header("content-type", "application/json")
            .header("idempotency-key", key)
            .body(body.clone())
            .timeout(Duration::from_secs(30))
            .send()
            .await;
        if let Ok(response) = sent {
            let status = response.status().as_u16();
            if status == 201 {
                let note: serde_json::Value = response.json().await.unwrap();
                let id = note["id"].as_str().unwrap().to_owned();
                receipts.ids.lock().unwrap().insert(key.to_owned(), id);
                return;
            }
            assert!(retried.contains(&status), "{key}: unexpected {status}");
        }
        receipts.setbacks.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `clients` concurrent clients, each creating `keys` keys (`k-{client}-{i}`) in turn.
pub async fn run(
    bases: Vec<String>,
    clients: usize,
    keys: usize,
    retried: &'static [u16],
    receipts: Receipts,
) {
    let client = reqwest::Client::new();
    let bases = Arc::new(bases);
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let (client, bases, receipts) = (client.clone(), bases.clone(), receipts.clone());
            tokio::spawn(async move {
                for i in 0..keys {
                    let key = format!("k-{c}-{i}");
                    until_created(&client, &bases, &key, retried, &receipts).await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
}
