//! `LeaseInbox::process` on SQLite in lease mode: a completed message acknowledged without
//! running, a held claim answered in flight, a failed run given back, and a re-execution after
//! a crash (the lease ran out) under the same derived keys.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use idemkey_core::{Begin, ClaimRequest, DerivedKeys, ExpiredLease, Key, Operation, Store};
use idemkey_inbox::{Action, DeadLetter, Incoming, LeaseHandler, LeaseInbox, RetryReason};
use idemkey_sqlx::SqliteStore;

use crate::common::fast;

fn order(id: &'static str, payload: &'static [u8], delivered: u64) -> Incoming<'static> {
    Incoming {
        id: Some(id),
        subject: "orders",
        payload,
        headers: Vec::new(),
        delivered,
    }
}

async fn inbox(dir: &tempfile::TempDir) -> LeaseInbox<SqliteStore> {
    let url = format!("sqlite://{}", dir.path().join("lease.db").display());
    let store = SqliteStore::connect(&url).await.unwrap();
    LeaseInbox::new(store, "shipper", Operation::new("ship", "v1"))
        .with_settings(fast())
        .with_lease(Duration::from_millis(300))
}

/// Records the key it was given for its "charge", and fails when told to.
#[derive(Clone, Default)]
struct Charge {
    keys: Arc<Mutex<Vec<String>>>,
    fail: bool,
    gate: Option<Arc<tokio::sync::Notify>>,
}

impl LeaseHandler for Charge {
    type Error = std::io::Error;

    async fn handle(&mut self, keys: &DerivedKeys) -> Result<(), std::io::Error> {
        self.keys.lock().unwrap().push(keys.key("charge"));
        if let Some(gate) = &self.gate {
            gate.notified().await;
        }
        if self.fail {
            return Err(std::io::Error::other("the provider is down"));
        }
        Ok(())
    }
}

impl Charge {
    fn keys(&self) -> Vec<String> {
        self.keys.lock().unwrap().clone()
    }
}

#[idemkey_test_support::test]
async fn a_completed_message_is_acknowledged_without_running_again() {
    let dir = tempfile::tempdir().unwrap();
    let inbox = inbox(&dir).await;
    let charge = Charge::default();
    let first = inbox
        .process(&order("m-1", b"o-1", 1), charge.clone())
        .await;
    assert!(matches!(first, Action::Ack { .. }), "{first:?}");
    let again = inbox
        .process(&order("m-1", b"o-1", 2), charge.clone())
        .await;
    assert!(matches!(again, Action::Ack { .. }), "{again:?}");
    assert_eq!(charge.keys().len(), 1);
    let other = inbox
        .process(&order("m-1", b"o-2", 1), charge.clone())
        .await;
    assert!(
        matches!(other, Action::DeadLetter(DeadLetter::Reused)),
        "{other:?}"
    );
    assert_eq!(charge.keys().len(), 1);
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_while_the_claim_is_held_is_in_flight_and_a_failed_run_is_given_back() {
    let dir = tempfile::tempdir().unwrap();
    let inbox = inbox(&dir).await;
    let gate = Arc::new(tokio::sync::Notify::new());
    let held = Charge {
        fail: true,
        gate: Some(Arc::clone(&gate)),
        ..Charge::default()
    };
    let running = {
        let (inbox, held) = (inbox.clone(), held.clone());
        tokio::spawn(async move { inbox.process(&order("m-1", b"o-1", 1), held).await })
    };
    while held.keys().is_empty() {
        tokio::task::yield_now().await;
    }
    let meanwhile = Charge::default();
    let second = inbox
        .process(&order("m-1", b"o-1", 2), meanwhile.clone())
        .await;
    assert!(
        matches!(
            second,
            Action::Retry {
                reason: RetryReason::InFlight,
                ..
            }
        ),
        "{second:?}"
    );
    assert!(meanwhile.keys().is_empty(), "ran while the claim was held");

    gate.notify_one();
    let failed = running.await.unwrap();
    assert!(
        matches!(
            failed,
            Action::Retry {
                reason: RetryReason::Failed(_),
                ..
            }
        ),
        "{failed:?}"
    );
    // Given back: the next delivery runs, under the same keys.
    let third = inbox
        .process(&order("m-1", b"o-1", 3), meanwhile.clone())
        .await;
    assert!(matches!(third, Action::Ack { .. }), "{third:?}");
    assert_eq!(meanwhile.keys(), held.keys());
}

#[idemkey_test_support::test]
async fn after_a_crash_the_message_runs_again_under_the_keys_of_the_first_run() {
    let dir = tempfile::tempdir().unwrap();
    let inbox = inbox(&dir).await;
    // A consumer claimed the message, ran its charge, and died before completing.
    let incoming = order("m-1", b"o-1", 1);
    let request = ClaimRequest::new(
        "shipper",
        Operation::new("ship", "v1"),
        Key::parse(b"m-1").unwrap(),
        idemkey_core::Fingerprint::builder("MESSAGE", "orders").body(b"o-1"),
    )
    .lease(Duration::from_millis(300));
    let Begin::Execute(claim) =
        idemkey_core::begin(inbox.store(), &request, ExpiredLease::TakeOver)
            .await
            .unwrap()
    else {
        panic!("not claimed");
    };
    let secret = inbox.store().secret().await.unwrap();
    let crashed = DerivedKeys::new(secret, claim.record_id).key("charge");

    let redelivered = Charge::default();
    let while_held = inbox.process(&incoming, redelivered.clone()).await;
    assert!(matches!(
        while_held,
        Action::Retry {
            reason: RetryReason::InFlight,
            ..
        }
    ));
    tokio::time::sleep(Duration::from_millis(400)).await;
    let after_lease = inbox
        .process(&order("m-1", b"o-1", 2), redelivered.clone())
        .await;
    assert!(matches!(after_lease, Action::Ack { .. }), "{after_lease:?}");
    assert_eq!(
        redelivered.keys(),
        [crashed],
        "the re-execution's charge went under a new key"
    );
}
