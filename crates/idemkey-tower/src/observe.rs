//! Metrics and trace fields of every decision (behaviour [§12](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#12-observability)).

use std::future::Future;
use std::time::{Duration, Instant};

/// Counts one request under its outcome and records it on the current span.
pub(crate) fn outcome(outcome: &'static str) {
    metrics::counter!("idemkey_requests_total", "outcome" => outcome).increment(1);
    tracing::Span::current().record("outcome", outcome);
    tracing::debug!(outcome, "idempotency decision");
}

/// Records the latency of store work measured elsewhere.
pub(crate) fn store_latency(op: &'static str, elapsed: Duration) {
    metrics::histogram!("idemkey_store_seconds", "op" => op).record(elapsed.as_secs_f64());
}

/// Awaits one store call, recording its latency.
pub(crate) async fn timed<T>(op: &'static str, call: impl Future<Output = T>) -> T {
    let start = Instant::now();
    let out = call.await;
    store_latency(op, start.elapsed());
    out
}
