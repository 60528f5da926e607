//! RFC 9457 problem details for idemkey's own responses (behaviour [§10](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#10-errors)).

use std::borrow::Cow;
use std::sync::OnceLock;
use std::time::Duration;

use crate::StoredResponse;

/// The base of problem types until [`set_type_base`] names the application's own: each type
/// is the base followed by its slug. It is the page of the `idemkey` documentation on docs.rs
/// where each problem type has a section anchored at its slug
/// (`https://docs.rs/idemkey/latest/idemkey/problems/index.html#key-reused`), so a developer
/// who opens a `type` reads what it means and what to do. It names `latest`, not a version:
/// a `type` is an identifier clients compare, the same in every release.
pub const PROBLEM_BASE: &str = "https://docs.rs/idemkey/latest/idemkey/problems/index.html#";

static TYPE_BASE: OnceLock<String> = OnceLock::new();

/// Sets, once per process, where the application documents its problem types: every problem
/// built afterwards has the `type` `base` followed by its slug
/// (`https://api.example.com/problems/` gives `https://api.example.com/problems/key-reused`).
/// Call it at start-up. Fails with the base in force if one was set already.
///
/// ```
/// idemkey_core::problem::set_type_base("https://api.example.com/problems/").unwrap();
/// let problem = idemkey_core::Problem::new(idemkey_core::ProblemKind::KeyReused);
/// assert_eq!(problem.type_uri, "https://api.example.com/problems/key-reused");
/// ```
pub fn set_type_base(base: impl Into<String>) -> Result<(), String> {
    TYPE_BASE
        .set(base.into())
        .map_err(|_| type_base().to_owned())
}

/// The base of problem types in force: [`set_type_base`]'s, else [`PROBLEM_BASE`].
pub fn type_base() -> &'static str {
    TYPE_BASE.get().map_or(PROBLEM_BASE, String::as_str)
}

/// The media type of problem responses.
pub const PROBLEM_CONTENT_TYPE: &str = "application/problem+json";

/// The outcomes idemkey answers itself, each with a stable `type`: the one catalogue both
/// modes answer from (an application's own problems are [`Problem::custom`]). What each means,
/// and what the client and the operator do about it, is its section of
/// [`idemkey::problems`](https://docs.rs/idemkey/latest/idemkey/problems/index.html), where its
/// default `type` leads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProblemKind {
    /// 400: the route requires a key and the request has none.
    KeyMissing,
    /// 400: the key is malformed, too long, or there are several.
    KeyInvalid,
    /// 422: the key was used for a different request or operation version.
    KeyReused,
    /// 409: another request with this key is still executing.
    RequestInFlight,
    /// 500, stored and replayed: an earlier attempt stopped without a result.
    PreviousAttemptUnknown,
    /// 413: the request body is over the limit.
    PayloadTooLarge,
    /// 503: the store could not be reached; the request was not executed.
    StoreUnavailable,
    /// 500: the commit's reply was lost; it may or may not have committed.
    OutcomeUnknown,
    /// 429: the actor reached a cap on its live records or stored bytes; the request was not
    /// executed.
    ActorCapReached,
    /// 500: the store failed in a way retrying will not mend; the request was not executed.
    StoreFailed,
    /// 500: the handler failed or panicked, in either mode; nothing was stored.
    HandlerFailed,
    /// 401: a keyed request reached the layer without an authenticated actor.
    Unauthenticated,
    /// 400: the request body could not be read.
    BodyUnreadable,
    /// 500: an atomic-mode handler asked for a transaction on a route without atomic mode.
    NoTransaction,
}

impl ProblemKind {
    /// Every kind, for documentation and tests.
    pub const ALL: [Self; 14] = [
        Self::KeyMissing,
        Self::KeyInvalid,
        Self::KeyReused,
        Self::RequestInFlight,
        Self::PreviousAttemptUnknown,
        Self::PayloadTooLarge,
        Self::StoreUnavailable,
        Self::OutcomeUnknown,
        Self::ActorCapReached,
        Self::StoreFailed,
        Self::HandlerFailed,
        Self::Unauthenticated,
        Self::BodyUnreadable,
        Self::NoTransaction,
    ];

    /// The stable slug: `key-reused`.
    pub fn slug(self) -> &'static str {
        match self {
            Self::KeyMissing => "key-missing",
            Self::KeyInvalid => "key-invalid",
            Self::KeyReused => "key-reused",
            Self::RequestInFlight => "request-in-flight",
            Self::PreviousAttemptUnknown => "previous-attempt-unknown",
            Self::PayloadTooLarge => "payload-too-large",
            Self::StoreUnavailable => "store-unavailable",
            Self::OutcomeUnknown => "outcome-unknown",
            Self::ActorCapReached => "actor-cap-reached",
            Self::StoreFailed => "store-failed",
            Self::HandlerFailed => "handler-failed",
            Self::Unauthenticated => "unauthenticated",
            Self::BodyUnreadable => "body-unreadable",
            Self::NoTransaction => "no-transaction",
        }
    }

    /// The default HTTP status.
    pub fn status(self) -> u16 {
        match self {
            Self::KeyMissing | Self::KeyInvalid | Self::BodyUnreadable => 400,
            Self::Unauthenticated => 401,
            Self::KeyReused => 422,
            Self::RequestInFlight => 409,
            Self::PreviousAttemptUnknown
            | Self::OutcomeUnknown
            | Self::StoreFailed
            | Self::HandlerFailed
            | Self::NoTransaction => 500,
            Self::PayloadTooLarge => 413,
            Self::StoreUnavailable => 503,
            Self::ActorCapReached => 429,
        }
    }

    /// A short, human-readable summary that does not change between occurrences.
    pub fn title(self) -> &'static str {
        match self {
            Self::KeyMissing => "Idempotency-Key header is required",
            Self::KeyInvalid => "Idempotency-Key header is invalid",
            Self::KeyReused => "Idempotency-Key was used for a different request",
            Self::RequestInFlight => "A request with this Idempotency-Key is in flight",
            Self::PreviousAttemptUnknown => "The outcome of an earlier attempt is unknown",
            Self::PayloadTooLarge => "Request body is too large",
            Self::StoreUnavailable => "Idempotency store is unavailable",
            Self::OutcomeUnknown => "The outcome of this request is unknown",
            Self::ActorCapReached => "Too many idempotency records for this actor",
            Self::StoreFailed => "The idempotency store failed",
            Self::HandlerFailed => "The request handler failed",
            Self::Unauthenticated => "Authentication is required",
            Self::BodyUnreadable => "Request body could not be read",
            Self::NoTransaction => "No transaction for this request",
        }
    }
}

/// An RFC 9457 problem: `type`, `title`, `status`, `detail`, and an optional `Retry-After`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The `type` URI.
    pub type_uri: Cow<'static, str>,
    /// The `title`.
    pub title: Cow<'static, str>,
    /// The HTTP status.
    pub status: u16,
    /// The `detail`, specific to this occurrence.
    pub detail: Option<String>,
    /// Sent as `Retry-After` in whole seconds.
    pub retry_after: Option<Duration>,
}

impl Problem {
    /// A problem of one of idemkey's kinds, with its default status.
    pub fn new(kind: ProblemKind) -> Self {
        Self::custom(kind.slug(), kind.title(), kind.status())
    }

    /// A problem of an application's own type, documented under the same base
    /// ([`type_base`]).
    pub fn custom(slug: &str, title: impl Into<Cow<'static, str>>, status: u16) -> Self {
        Self {
            type_uri: Cow::Owned(format!("{}{slug}", type_base())),
            title: title.into(),
            status,
            detail: None,
            retry_after: None,
        }
    }

    /// Sets the detail.
    #[must_use]
    pub fn detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    /// Overrides the status (a route may answer `key-reused` with 409, as the seed did).
    #[must_use]
    pub fn status(mut self, status: u16) -> Self {
        self.status = status;
        self
    }

    /// Sets `Retry-After`.
    #[must_use]
    pub fn retry_after(mut self, after: Duration) -> Self {
        self.retry_after = Some(after);
        self
    }

    /// The JSON body.
    pub fn to_json(&self) -> Vec<u8> {
        let mut body = serde_json::json!({
            "type": self.type_uri,
            "title": self.title,
            "status": self.status,
        });
        if let Some(detail) = &self.detail {
            body["detail"] = detail.as_str().into();
        }
        serde_json::to_vec(&body).unwrap_or_default()
    }

    /// The headers of the response, lower-case: content type, `no-store`, `Retry-After`.
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        let mut headers = vec![
            ("content-type", PROBLEM_CONTENT_TYPE.to_owned()),
            ("cache-control", "no-store".to_owned()),
        ];
        if let Some(after) = self.retry_after {
            headers.push(("retry-after", after.as_secs().max(1).to_string()));
        }
        headers
    }

    /// The problem as a complete response, as stored for replay.
    pub fn to_stored(&self) -> StoredResponse {
        let mut response = StoredResponse::new(self.status, self.to_json());
        for (name, value) in self.headers() {
            response = response.with_header(name, value);
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_has_the_rfc9457_members() {
        let problem = Problem::new(ProblemKind::KeyReused).detail("d");
        let body: serde_json::Value = serde_json::from_slice(&problem.to_json()).unwrap();
        assert_eq!(
            body["type"],
            "https://docs.rs/idemkey/latest/idemkey/problems/index.html#key-reused"
        );
        assert_eq!(body["status"], 422);
        assert_eq!(body["detail"], "d");
        assert!(body["title"].is_string());
    }

    #[test]
    fn every_kind_has_its_own_slug_and_title() {
        let slugs: std::collections::HashSet<_> =
            ProblemKind::ALL.iter().map(|k| k.slug()).collect();
        assert_eq!(slugs.len(), ProblemKind::ALL.len());
        for kind in ProblemKind::ALL {
            assert!(!kind.title().is_empty());
            assert!((400..600).contains(&kind.status()), "{kind:?}");
        }
    }

    #[test]
    fn retry_after_and_no_store() {
        let problem =
            Problem::new(ProblemKind::RequestInFlight).retry_after(Duration::from_secs(3));
        let headers = problem.headers();
        assert!(headers.contains(&("cache-control", "no-store".to_owned())));
        assert!(headers.contains(&("retry-after", "3".to_owned())));
    }
}
