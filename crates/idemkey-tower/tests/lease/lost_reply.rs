//! Lease mode, the reply to the completion lost after the store applied it (behaviour §10):
//! the retried completion finds the record completed by this very claim, and counts the
//! response as stored, not the lease as lost. The metrics are read from a recorder local to
//! the test's thread: the test's runtime runs every task of its server there, and no other
//! test's metrics reach it.

use std::sync::atomic::Ordering;

use crate::common::{App, send};
use idemkey_tower::Config;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

/// The request counter of each outcome, from one snapshot (a snapshot drains the counters).
fn outcomes(snapshotter: &Snapshotter) -> impl Fn(&str) -> u64 {
    let snapshot = snapshotter.snapshot().into_vec();
    move |outcome| count(&snapshot, outcome)
}

type Snapshot = Vec<(
    metrics_util::CompositeKey,
    Option<metrics::Unit>,
    Option<metrics::SharedString>,
    DebugValue,
)>;

fn count(snapshot: &Snapshot, outcome: &str) -> u64 {
    snapshot
        .iter()
        .filter(|(key, ..)| {
            key.key().name() == "idemkey_requests_total"
                && key.key().labels().any(|l| l.value() == outcome)
        })
        .map(|(.., value)| match value {
            DebugValue::Counter(n) => *n,
            _ => 0,
        })
        .sum()
}

#[tokio::test]
async fn a_lost_completion_reply_counts_as_stored() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let app = App::start(Config::default()).await;
    app.store
        .hooks
        .lost_complete_replies
        .store(1, Ordering::SeqCst);
    let first = send(app.json("/notes", "k", r#"{"title":"x"}"#)).await;
    assert_eq!(first.status, 201);
    let retry = send(app.json("/notes", "k", r#"{"title":"x"}"#)).await;
    assert!(retry.replayed());
    assert_eq!(retry.body, first.body);
    let outcome = outcomes(&snapshotter);
    assert_eq!(outcome("lease_lost"), 0, "the lease was never lost");
    assert_eq!(outcome("executed"), 1);
    assert_eq!(app.ctx.runs(), 1);
}
