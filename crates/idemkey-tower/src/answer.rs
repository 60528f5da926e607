//! The one place outcomes become responses, in both modes: replays, the problems of a
//! decided record, of a failed store and of a failed handler (behaviour §10).

use std::time::Duration;

use axum::body::Body;
use http::Response;
use idemkey_core::{Begin, Claim, Error, Problem, ProblemKind};

use crate::observe::outcome;
use crate::{Config, problem_response, replay_response};

/// `Retry-After` of `store-unavailable`.
const STORE_RETRY_AFTER: Duration = Duration::from_secs(1);

/// The response to a request that `begun` answers without executing: a replay,
/// `key-reused` or `request-in-flight`; a granted claim is given back.
// The claim is handed back once, to the caller that executes it, never propagated.
#[allow(clippy::result_large_err)]
pub(crate) fn answered(
    begun: Begin,
    request: &http::HeaderMap,
    config: &Config,
) -> Result<Response<Body>, Claim> {
    let problem = match begun {
        Begin::Execute(claim) => return Err(claim),
        Begin::Replay(stored) => {
            outcome("replayed");
            return Ok(replay_response(&stored, request));
        }
        Begin::Mismatch => {
            outcome("key_reused");
            Problem::new(ProblemKind::KeyReused)
                .status(config.mismatch_status.as_u16())
                .detail("this key was already used for a different request")
        }
        Begin::InFlight { retry_after } => {
            outcome("in_flight");
            Problem::new(ProblemKind::RequestInFlight).retry_after(retry_after)
        }
    };
    Ok(problem_response(&problem))
}

/// The answer of a task of its own (an execution, in either mode): a panic is
/// `handler-failed`.
pub(crate) fn joined<E>(
    task: Result<Result<Response<Body>, E>, tokio::task::JoinError>,
) -> Result<Response<Body>, E> {
    task.unwrap_or_else(|err| {
        tracing::error!(error = %err, "the idempotency task failed");
        let problem = Problem::custom("handler-failed", "The request handler failed", 500);
        Ok(problem_response(&problem))
    })
}

/// The problem answered when the handler panicked or its body could not be read.
pub(crate) fn handler_failed() -> Problem {
    Problem::custom("handler-failed", "The request handler failed", 500)
        .detail("the request was not completed; it is safe to retry with the same key")
}

/// A store failure: the request was not executed, unless the outcome is unknown. Only what
/// may pass is `store-unavailable` (503, retry); a permanent failure (a denied permission, a
/// missing table, a corrupt record) is 500 `store-failed`, so clients do not retry forever.
pub(crate) fn store_error(err: &Error) -> Response<Body> {
    match err {
        Error::OutcomeUnknown(_) => {
            tracing::error!(error = %err, "the outcome of a store write is unknown");
            outcome("outcome_unknown");
            return problem_response(&Problem::new(ProblemKind::OutcomeUnknown));
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
        _ => Problem::custom("store-failed", "The idempotency store failed", 500).detail(what),
    }
}
