//! Metrics and trace fields of every decision (contract §12).

use std::future::Future;
use std::time::Instant;

/// Counts one request under its outcome and records it on the current span.
pub(crate) fn outcome(outcome: &'static str) {
    metrics::counter!("idemkey_requests_total", "outcome" => outcome).increment(1);
    tracing::Span::current().record("outcome", outcome);
    tracing::debug!(outcome, "idempotency decision");
}

/// Awaits one store call, recording its latency.
pub(crate) async fn timed<T>(op: &'static str, call: impl Future<Output = T>) -> T {
    let start = Instant::now();
    let out = call.await;
    metrics::histogram!("idemkey_store_seconds", "op" => op).record(start.elapsed().as_secs_f64());
    out
}
