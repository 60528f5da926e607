//! The retry table: what one attempt's outcome means for the next. Each row is a test below;
//! the crate's documentation and docs/client.md print the same table.

use http::StatusCode;
use idemkey_core::ProblemKind;

/// Why an attempt is retried: a row of the table, and the `reason` label of the
/// `idemkey_client_retries_total` and `idemkey_client_give_ups_total` metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reason {
    /// The connection could not be made (refused, unreachable, a TLS handshake failed): the
    /// request was not sent.
    Connect,
    /// No answer within the attempt's time.
    Timeout,
    /// The connection closed or was reset before an answer.
    NoAnswer,
    /// The answer was cut off: its body ended early.
    CutOff,
    /// 408: the server gave up waiting for the request (idemkey's 408 `body-unreadable`):
    /// nothing ran, and the key covers a server that did run it.
    RequestTimeout,
    /// 409 `request-in-flight`, or a 409 with `Retry-After`: the same key is still
    /// executing. A poll, bounded by time rather than by the retry count or budget.
    InFlight,
    /// Another 409 to a keyed request, unless its problem type says the key was reused: the
    /// draft gives a keyed request's 409 one meaning, the same key still being processed.
    Conflict,
    /// 429: the server asks to slow down.
    TooManyRequests,
    /// 502: the gateway got no valid answer from the server behind it.
    BadGateway,
    /// 503: the server cannot take the request now.
    Unavailable,
    /// 504: the gateway timed out waiting for the server behind it.
    GatewayTimeout,
    /// 500 `outcome-unknown`: the server lost its database's reply; the key settles it.
    OutcomeUnknown,
    /// The answer says `Stripe-Should-Retry: true`.
    ServerAsked,
    /// Another 5xx (idemkey releases the claim on one; [`Policy::retry_server_errors`]).
    ///
    /// [`Policy::retry_server_errors`]: crate::Policy::retry_server_errors
    ServerError,
}

impl Reason {
    /// The metric label: `connect`, `timeout`, `no-answer`, `cut-off`, `request-timeout`,
    /// `in-flight`, `conflict`, `too-many-requests`, `bad-gateway`, `unavailable`, `gateway-timeout`,
    /// `outcome-unknown`, `server-asked`, `server-error`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Connect => "connect",
            Self::Timeout => "timeout",
            Self::NoAnswer => "no-answer",
            Self::CutOff => "cut-off",
            Self::RequestTimeout => "request-timeout",
            Self::InFlight => "in-flight",
            Self::Conflict => "conflict",
            Self::TooManyRequests => "too-many-requests",
            Self::BadGateway => "bad-gateway",
            Self::Unavailable => "unavailable",
            Self::GatewayTimeout => "gateway-timeout",
            Self::OutcomeUnknown => "outcome-unknown",
            Self::ServerAsked => "server-asked",
            Self::ServerError => "server-error",
        }
    }

    /// Whether the request may not have been sent at all, so that even a request that is
    /// neither keyed nor idempotent may be sent again.
    pub(crate) fn nothing_sent(self) -> bool {
        self == Self::Connect
    }

    /// Whether the retry polls a request still running, which the server paces: counted
    /// against time, not against the retry count or the budget.
    pub(crate) fn is_poll(self) -> bool {
        self == Self::InFlight
    }

    /// The retry budget's tokens this retry takes: two when the request may still be running
    /// on the server (no answer came), one otherwise.
    pub(crate) fn cost(self) -> u32 {
        match self {
            Self::Timeout | Self::NoAnswer | Self::CutOff => 2,
            _ => 1,
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An attempt that ended without an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    Connect,
    Timeout,
    NoAnswer,
    CutOff,
    /// Not the network's doing (a malformed URL, a redirect loop, another middleware's
    /// error): sending again would fail the same way.
    Other,
}

/// An answer, as the table reads it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Answer<'a> {
    pub(crate) status: StatusCode,
    /// The slug of a problem+json body's `type`: what follows its last `/` or `#`.
    pub(crate) problem: Option<&'a str>,
    /// The answer carries `Retry-After`.
    pub(crate) retry_after: bool,
    /// The answer carries `Idempotent-Replayed: true`: a stored answer, which the same key
    /// gets again.
    pub(crate) replayed: bool,
    /// `Stripe-Should-Retry`, the server's own word on whether a retry can help.
    pub(crate) should_retry: Option<bool>,
    /// The request carried a key.
    pub(crate) keyed: bool,
}

/// The row for an attempt that got no answer; `None` means final.
pub(crate) fn failure(failure: Failure) -> Option<Reason> {
    match failure {
        Failure::Connect => Some(Reason::Connect),
        Failure::Timeout => Some(Reason::Timeout),
        Failure::NoAnswer => Some(Reason::NoAnswer),
        Failure::CutOff => Some(Reason::CutOff),
        Failure::Other => None,
    }
}

/// The row for an answer; `None` means final. `server_errors` is
/// [`Policy::retry_server_errors`](crate::Policy::retry_server_errors).
pub(crate) fn answer(answer: Answer<'_>, server_errors: bool) -> Option<Reason> {
    if answer.replayed {
        return None;
    }
    match answer.should_retry {
        Some(true) => return Some(Reason::ServerAsked),
        Some(false) => return None,
        None => {}
    }
    let is = |kind: ProblemKind| answer.problem == Some(kind.slug());
    match answer.status.as_u16() {
        408 => Some(Reason::RequestTimeout),
        409 if is(ProblemKind::RequestInFlight) || answer.retry_after => Some(Reason::InFlight),
        // The key is the request's mistake, not its state: a retry gets the same refusal.
        409 if is(ProblemKind::KeyReused) => None,
        409 if answer.keyed => Some(Reason::Conflict),
        429 => Some(Reason::TooManyRequests),
        502 => Some(Reason::BadGateway),
        503 => Some(Reason::Unavailable),
        504 => Some(Reason::GatewayTimeout),
        500 if is(ProblemKind::OutcomeUnknown) => Some(Reason::OutcomeUnknown),
        // Stored and replayed for this key: every retry would get it again.
        500 if is(ProblemKind::PreviousAttemptUnknown) => None,
        // The server's own failure that a retry cannot mend (problems.md says so).
        500 if is(ProblemKind::StoreFailed) || is(ProblemKind::NoTransaction) => None,
        500..=599 if server_errors => Some(Reason::ServerError),
        _ => None,
    }
}

/// The slug of a problem type URI: `…/problems/index.html#key-reused` → `key-reused`.
pub(crate) fn slug(problem_type: &str) -> &str {
    problem_type
        .rsplit(['/', '#'])
        .next()
        .unwrap_or(problem_type)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16) -> Answer<'static> {
        Answer {
            status: StatusCode::from_u16(code).unwrap(),
            problem: None,
            retry_after: false,
            replayed: false,
            should_retry: None,
            keyed: true,
        }
    }

    fn problem(code: u16, slug: &'static str) -> Answer<'static> {
        Answer {
            problem: Some(slug),
            ..status(code)
        }
    }

    fn retried(answer: Answer<'_>) -> Option<Reason> {
        super::answer(answer, true)
    }

    #[test]
    fn no_answer_at_all_is_retried_with_the_same_key() {
        assert_eq!(failure(Failure::Connect), Some(Reason::Connect));
        assert_eq!(failure(Failure::Timeout), Some(Reason::Timeout));
        assert_eq!(failure(Failure::NoAnswer), Some(Reason::NoAnswer));
        assert_eq!(failure(Failure::CutOff), Some(Reason::CutOff));
    }

    #[test]
    fn a_failure_that_is_not_the_networks_is_final() {
        assert_eq!(failure(Failure::Other), None);
    }

    #[test]
    fn request_in_flight_waits_and_retries() {
        let in_flight = problem(409, "request-in-flight");
        assert_eq!(retried(in_flight), Some(Reason::InFlight));
    }

    #[test]
    fn a_409_with_retry_after_is_retried_whatever_its_body() {
        let asked = Answer {
            retry_after: true,
            ..status(409)
        };
        assert_eq!(retried(asked), Some(Reason::InFlight));
    }

    #[test]
    fn request_timeout_is_retried() {
        assert_eq!(retried(status(408)), Some(Reason::RequestTimeout));
        let cut_off = problem(408, "body-unreadable");
        assert_eq!(retried(cut_off), Some(Reason::RequestTimeout));
    }

    #[test]
    fn another_409_to_a_keyed_request_is_retried_unless_the_key_was_reused() {
        assert_eq!(retried(status(409)), Some(Reason::Conflict));
        assert_eq!(retried(problem(409, "email-taken")), Some(Reason::Conflict));
        assert_eq!(retried(problem(409, "key-reused")), None);
    }

    #[test]
    fn another_409_to_a_request_without_a_key_is_final() {
        let unkeyed = Answer {
            keyed: false,
            ..problem(409, "email-taken")
        };
        assert_eq!(retried(unkeyed), None);
        let in_flight = Answer {
            keyed: false,
            ..problem(409, "request-in-flight")
        };
        assert_eq!(retried(in_flight), Some(Reason::InFlight));
    }

    #[test]
    fn only_polls_escape_the_count_and_lost_answers_cost_double() {
        assert!(Reason::InFlight.is_poll() && !Reason::Conflict.is_poll());
        assert_eq!((Reason::Timeout.cost(), Reason::NoAnswer.cost()), (2, 2));
        assert_eq!((Reason::Unavailable.cost(), Reason::Connect.cost()), (1, 1));
    }

    #[test]
    fn too_many_requests_is_retried_with_or_without_retry_after() {
        assert_eq!(retried(status(429)), Some(Reason::TooManyRequests));
        let asked = Answer {
            retry_after: true,
            ..problem(429, "actor-cap-reached")
        };
        assert_eq!(retried(asked), Some(Reason::TooManyRequests));
    }

    #[test]
    fn unavailable_is_retried_with_or_without_retry_after() {
        assert_eq!(retried(status(503)), Some(Reason::Unavailable));
        let asked = Answer {
            retry_after: true,
            ..problem(503, "store-unavailable")
        };
        assert_eq!(retried(asked), Some(Reason::Unavailable));
    }

    #[test]
    fn gateway_failures_are_retried() {
        assert_eq!(retried(status(502)), Some(Reason::BadGateway));
        assert_eq!(retried(status(504)), Some(Reason::GatewayTimeout));
    }

    #[test]
    fn outcome_unknown_is_retried_even_when_other_5xx_are_not() {
        let unknown = problem(500, "outcome-unknown");
        assert_eq!(answer(unknown, false), Some(Reason::OutcomeUnknown));
    }

    #[test]
    fn key_reused_is_never_retried() {
        assert_eq!(retried(problem(422, "key-reused")), None);
    }

    #[test]
    fn key_missing_and_key_invalid_are_never_retried() {
        assert_eq!(retried(problem(400, "key-missing")), None);
        assert_eq!(retried(problem(400, "key-invalid")), None);
    }

    #[test]
    fn every_other_4xx_is_final() {
        for code in (400..=499).filter(|code| ![408, 409, 429].contains(code)) {
            assert_eq!(retried(status(code)), None, "{code}");
        }
    }

    #[test]
    fn other_5xx_are_retried_by_default_and_final_when_configured_so() {
        for code in [500, 501, 505, 507, 599] {
            assert_eq!(
                answer(status(code), true),
                Some(Reason::ServerError),
                "{code}"
            );
            assert_eq!(answer(status(code), false), None, "{code}");
        }
        let failed = problem(500, "handler-failed");
        assert_eq!(answer(failed, true), Some(Reason::ServerError));
    }

    #[test]
    fn a_stored_previous_attempt_unknown_is_final() {
        assert_eq!(retried(problem(500, "previous-attempt-unknown")), None);
    }

    #[test]
    fn store_failed_and_no_transaction_are_final() {
        assert_eq!(retried(problem(500, "store-failed")), None);
        assert_eq!(retried(problem(500, "no-transaction")), None);
    }

    #[test]
    fn stripe_should_retry_is_the_servers_word() {
        let asked = Answer {
            should_retry: Some(true),
            ..status(409)
        };
        assert_eq!(retried(asked), Some(Reason::ServerAsked));
        let refused = Answer {
            should_retry: Some(false),
            ..status(503)
        };
        assert_eq!(retried(refused), None);
    }

    #[test]
    fn a_replayed_answer_is_final_whatever_its_status() {
        for code in [409, 429, 500, 503] {
            let replay = Answer {
                replayed: true,
                ..status(code)
            };
            assert_eq!(retried(replay), None, "{code}");
        }
    }

    #[test]
    fn success_and_redirects_are_final() {
        for code in [200, 201, 204, 301, 304] {
            assert_eq!(retried(status(code)), None, "{code}");
        }
    }

    #[test]
    fn slugs_come_after_the_last_slash_or_hash() {
        let docs = "https://docs.rs/idemkey/latest/idemkey/problems/index.html#key-reused";
        assert_eq!(slug(docs), "key-reused");
        assert_eq!(
            slug("https://example.com/problems/request-in-flight"),
            "request-in-flight"
        );
        assert_eq!(slug("outcome-unknown"), "outcome-unknown");
    }
}
