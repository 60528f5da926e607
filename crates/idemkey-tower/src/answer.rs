//! The one place outcomes become responses, in both modes: replays, the problems of a
//! decided record, of a failed store and of a failed handler (behaviour [§10](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#10-errors)).

use std::time::Duration;

use crate::Body;
use http::Response;
use idemkey_core::{Answer, Begin, Claim, Error, Problem, ProblemKind};
#[cfg(feature = "sqlx")]
use idemkey_sqlx::{AtomicError, Outcome};

use crate::misconfig::{Noticed, no_actor};
use crate::observe::outcome;
use crate::prepare::UNAUTHENTICATED;
use crate::{Config, Rejection, problem_response, replay_response};

/// `Retry-After` of `store-unavailable`.
const STORE_RETRY_AFTER: Duration = Duration::from_secs(1);

/// The response to a request rejected before execution. A keyed request without an actor is
/// also logged, once per layer (`noticed`): it is as often the layer's placement as the client.
pub(crate) fn rejected(rejection: &Rejection, noticed: &Noticed) -> Response<Body> {
    if rejection.outcome == UNAUTHENTICATED {
        no_actor(noticed);
    }
    outcome(rejection.outcome);
    problem_response(&rejection.problem)
}

/// The response to a request that `begun` answers without executing: a replay,
/// `key-reused` or `request-in-flight`; a granted claim is given back.
// The claim is handed back once, to the caller that executes it, never propagated.
#[allow(clippy::result_large_err)]
pub(crate) fn answered(
    begun: Begin,
    request: &http::HeaderMap,
    config: &Config,
) -> Result<Response<Body>, Claim> {
    let decided = match begun {
        Begin::Execute(claim) => return Err(claim),
        Begin::Replay(stored) => Answer::Replay(stored),
        Begin::Mismatch => Answer::Mismatch,
        Begin::InFlight { retry_after } => Answer::InFlight { retry_after },
    };
    Ok(answer(decided, request, config))
}

/// The response to a request its record answers without executing, in either mode: the
/// stored response replayed for these request headers, `key-reused` or `request-in-flight`.
pub(crate) fn answer(
    decided: Answer,
    request: &http::HeaderMap,
    config: &Config,
) -> Response<Body> {
    let problem = match decided {
        Answer::Replay(stored) => {
            outcome("replayed");
            return replay_response(&stored, request);
        }
        Answer::Mismatch => {
            outcome("key_reused");
            Problem::new(ProblemKind::KeyReused)
                .status(config.mismatch_status.as_u16())
                .detail("this key was already used for a different request")
        }
        // The decision's `retry_after` is what is left of the original's lease: when the
        // answer is sure to be there, not when it is likely to be.
        Answer::InFlight { retry_after } => {
            outcome("in_flight");
            Problem::new(ProblemKind::RequestInFlight)
                .retry_after(config.in_flight_retry(retry_after))
        }
    };
    problem_response(&problem)
}

/// The response to what atomic mode's execution came to: the handler's own response when it
/// ran (stored or not), the record's answer when it decided, or the problem of a failed
/// store or handler (rolled back either way).
#[cfg(feature = "sqlx")]
pub(crate) fn answer_outcome<R, E>(
    result: Result<Outcome<R>, AtomicError<E>>,
    config: &Config,
    request: &http::HeaderMap,
) -> Response<Body>
where
    R: Into<Response<Body>>,
    E: std::error::Error,
{
    let decided = match result {
        Ok(Outcome::Executed(output)) => {
            outcome("executed");
            return output.into();
        }
        Ok(Outcome::NotStored(output)) => {
            outcome("released");
            return output.into();
        }
        Ok(Outcome::Replayed(stored)) => Answer::Replay(stored),
        Ok(Outcome::Mismatch) => Answer::Mismatch,
        Ok(Outcome::InFlight { retry_after }) => Answer::InFlight { retry_after },
        Err(AtomicError::Store(error)) => return store_error(&error),
        Err(error) => {
            tracing::error!(%error, "atomic handler failed; rolled back");
            outcome("handler_error");
            return problem_response(&handler_failed());
        }
    };
    answer(decided, request, config)
}

/// The answer of a lease-mode task of its own: a panic is `handler-failed`.
pub(crate) fn joined<E>(
    task: Result<Result<Response<Body>, E>, tokio::task::JoinError>,
) -> Result<Response<Body>, E> {
    task.unwrap_or_else(|err| {
        tracing::error!(error = %err, "the idempotency task failed");
        Ok(problem_response(&handler_failed()))
    })
}

/// The problem answered, in both modes, when the handler panicked, failed or its body could
/// not be read: nothing was stored, so a retry with the same key is safe (behaviour [§10](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#10-errors)).
pub(crate) fn handler_failed() -> Problem {
    Problem::new(ProblemKind::HandlerFailed)
        .detail("the request was not completed; it is safe to retry with the same key")
}

/// The problem of a handler whose transaction rolled back because its lease was lost
/// meanwhile: a newer execution holds the request, whose answer will be stored. Its
/// `Retry-After` is that of any `request-in-flight` ([`Config::in_flight_retry_after`]).
pub(crate) fn lease_lost(config: &Config) -> Problem {
    Problem::new(ProblemKind::RequestInFlight)
        .detail("another execution holds this request now; retry with the same key")
        .retry_after(config.in_flight_retry(config.lease))
}

/// A store failure: the request was not executed, unless the outcome is unknown. Only what
/// may pass is `store-unavailable` (503, retry); a permanent failure (a denied permission, a
/// missing table, a corrupt record) is 500 `store-failed`, so clients do not retry forever.
pub(crate) fn store_error(err: &Error) -> Response<Body> {
    match err {
        Error::OutcomeUnknown(_) => {
            tracing::error!(error = %err, "the outcome of a store write is unknown");
            outcome("outcome_unknown");
            return problem_response(&outcome_unknown());
        }
        Error::Unavailable(_) | Error::Contention => {
            tracing::warn!(error = %err, "idempotency store unavailable; the request was not executed");
        }
        Error::ActorCap { cap, retry_after } => {
            tracing::info!(%cap, "actor cap reached; the request was not executed");
            outcome("actor_cap");
            let problem = Problem::new(ProblemKind::ActorCapReached)
                .detail(format!(
                    "the actor reached its cap on {cap}; the request was not executed"
                ))
                .retry_after(*retry_after);
            return problem_response(&problem);
        }
        _ => {
            tracing::error!(error = %err, "idempotency store failed; the request was not executed");
        }
    }
    outcome("store_error");
    problem_response(&store_failure(err, "the request was not executed"))
}

/// The problem of a store failure, `what` having happened to the request: what may pass
/// (unavailable, contention) is `store-unavailable` (503, retry with the same key); the
/// rest is `store-failed` (500), so clients do not retry forever.
pub(crate) fn store_failure(err: &Error, what: &str) -> Problem {
    match err {
        Error::Unavailable(_) | Error::Contention => Problem::new(ProblemKind::StoreUnavailable)
            .detail(format!("{what}; retry with the same key"))
            .retry_after(STORE_RETRY_AFTER),
        _ => Problem::new(ProblemKind::StoreFailed).detail(what),
    }
}

/// The problem of a write whose reply was lost: it may have applied, so the client must not
/// be told that nothing ran (behaviour [§10](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#10-errors)).
pub(crate) fn outcome_unknown() -> Problem {
    Problem::new(ProblemKind::OutcomeUnknown)
}

/// The problem of a handler that takes a `Tx` its route's layer does not offer, or takes it
/// twice: a misconfiguration, `detail` naming it.
#[cfg(feature = "sqlx")]
pub(crate) fn no_transaction(detail: impl Into<String>) -> Problem {
    Problem::new(ProblemKind::NoTransaction).detail(detail)
}

/// The answer when the store could not be asked before the layer began (idemkey proxy
/// readies each request's actor from it): 503 `store-unavailable`, the request not executed.
/// Unlike [`IdempotencyLayer`](crate::IdempotencyLayer)'s answers to a failed store, it
/// carries no detail and no `Retry-After`, whatever the error.
pub fn store_unavailable() -> Response<Body> {
    problem_response(&Problem::new(ProblemKind::StoreUnavailable))
}
