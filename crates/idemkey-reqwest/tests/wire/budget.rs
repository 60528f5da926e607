//! The retry budget: many callers against a server in an outage retry within the budget's
//! burst and rate, however fast their own backoff would let them, and each gets through once
//! the server recovers.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::support::{Server, client, created, fast, status};

const CALLERS: usize = 50;
const OUTAGE: Duration = Duration::from_secs(10);
/// The default budget: 100 tokens, 10 a second, one a retry after a 503.
const BURST: f64 = 100.0;
const PER_SECOND: f64 = 10.0;

#[tokio::test]
async fn fifty_callers_in_an_outage_retry_within_the_budget_and_each_creates_once() {
    let start = Instant::now();
    let created_count = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&created_count);
    let server = Server::scripted(move |_| {
        if start.elapsed() < OUTAGE {
            status(503)
        } else {
            counter.fetch_add(1, Ordering::SeqCst);
            created()
        }
    })
    .await;
    // A backoff of a few milliseconds and retries without number: only the budget (and the
    // 60 s limit) holds the callers back.
    let client = client(fast().max_retries(u32::MAX));

    let callers = (0..CALLERS).map(|_| {
        let request = client.post(server.url("/notes")).body("{}");
        tokio::spawn(async move { request.send().await.unwrap().status() })
    });
    for caller in callers.collect::<Vec<_>>() {
        assert_eq!(caller.await.unwrap(), 201);
    }

    let seen = server.seen();
    let recovered = start + OUTAGE;
    let in_outage = seen.iter().filter(|s| s.at < recovered).count();
    let bound = CALLERS as f64 + BURST + PER_SECOND * OUTAGE.as_secs_f64();
    println!(
        "{in_outage} attempts in the outage (bound {bound}), {} in all",
        seen.len()
    );
    assert!(in_outage as f64 <= bound, "{in_outage} attempts > {bound}");
    assert_eq!(created_count.load(Ordering::SeqCst), CALLERS);
    let mut per_key: HashMap<Option<String>, usize> = HashMap::new();
    for attempt in seen.iter().filter(|s| s.at >= recovered) {
        *per_key.entry(attempt.key.clone()).or_default() += 1;
    }
    assert_eq!(
        per_key.len(),
        CALLERS,
        "a caller got through twice or not at all"
    );
    assert!(per_key.keys().all(Option::is_some));
}
