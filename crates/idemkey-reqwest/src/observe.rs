//! The middleware's metrics (the `metrics` facade) and trace spans.

use reqwest::{Method, Url};
use tracing::Span;

use crate::{IdempotencyKey, Reason};

/// Attempts made, first ones included.
pub(crate) const ATTEMPTS: &str = "idemkey_client_attempts_total";
/// Retries, by `reason`.
pub(crate) const RETRIES: &str = "idemkey_client_retries_total";
/// Requests given up, by `reason` and `limit`: out of attempts, time or budget, or a stream
/// body.
pub(crate) const GIVE_UPS: &str = "idemkey_client_give_ups_total";

/// The span of one attempt, at DEBUG: an application tracing at INFO pays nothing for it on
/// each request. The URL's host only: paths and queries may hold secrets.
pub(crate) fn attempt_span(
    method: &Method,
    url: &Url,
    key: Option<&IdempotencyKey>,
    attempt: u32,
) -> Span {
    tracing::debug_span!(
        "idemkey.attempt",
        attempt,
        method = %method,
        host = url.host_str().unwrap_or(""),
        key = key.map_or("", IdempotencyKey::as_str),
        status = tracing::field::Empty,
        retry = tracing::field::Empty,
    )
}

pub(crate) fn attempted() {
    metrics::counter!(ATTEMPTS).increment(1);
}

pub(crate) fn retrying(reason: Reason) {
    metrics::counter!(RETRIES, "reason" => reason.as_str()).increment(1);
}

/// `why`: `attempts`, `time`, `budget` or `stream`.
pub(crate) fn gave_up(reason: Reason, why: &'static str) {
    metrics::counter!(GIVE_UPS, "reason" => reason.as_str(), "limit" => why).increment(1);
    tracing::warn!(reason = reason.as_str(), limit = why, "idemkey: giving up");
}
