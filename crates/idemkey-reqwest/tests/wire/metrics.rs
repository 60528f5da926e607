//! The metrics the middleware counts: attempts, retries by reason, give-ups by reason and
//! limit.

use metrics_util::debugging::{DebugValue, DebuggingRecorder};

use crate::support::{Reply, Server, client, created, fast, status};

/// A counter: its name, its labels, its count.
type Counter = (String, Vec<(String, String)>, u64);

/// The counter `name` with every label in `labels`, from one snapshot.
fn counter(snapshot: &[Counter], name: &str, labels: &[(&str, &str)]) -> u64 {
    snapshot
        .iter()
        .filter(|(n, l, _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.iter().any(|(lk, lv)| lk == k && lv == v))
        })
        .map(|(.., n)| n)
        .sum()
}

fn snapshot(recorder: &DebuggingRecorder) -> Vec<Counter> {
    let snapshot = recorder.snapshotter().snapshot().into_vec();
    snapshot
        .into_iter()
        .filter_map(|(key, _, _, value)| {
            let DebugValue::Counter(n) = value else {
                return None;
            };
            let labels = key.key().labels();
            let labels = labels.map(|l| (l.key().to_owned(), l.value().to_owned()));
            Some((key.key().name().to_owned(), labels.collect(), n))
        })
        .collect()
}

#[tokio::test]
async fn attempts_retries_and_give_ups_are_counted() {
    let recorder = DebuggingRecorder::new();
    let _local = metrics::set_default_local_recorder(&recorder);

    let server = Server::start(vec![Reply::Drop, status(503), created()]).await;
    let response = client(fast())
        .post(server.url("/notes"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let given_up = Server::start(vec![status(503), status(503)]).await;
    let response = client(fast().max_retries(1))
        .post(given_up.url("/notes"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503);

    let counts = snapshot(&recorder);
    assert_eq!(counter(&counts, "idemkey_client_attempts_total", &[]), 5);
    let retries = "idemkey_client_retries_total";
    assert_eq!(counter(&counts, retries, &[("reason", "no-answer")]), 1);
    assert_eq!(counter(&counts, retries, &[("reason", "unavailable")]), 2);
    let give_ups = [("reason", "unavailable"), ("limit", "attempts")];
    assert_eq!(
        counter(&counts, "idemkey_client_give_ups_total", &give_ups),
        1
    );
}
