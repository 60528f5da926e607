//! The front half of lease mode: the lookup, made in the request's own task (§5).
//!
//! A replay, a mismatch or (unless the request is to wait for the original) a request in
//! flight needs no task of its own (only the work from the claim on must outlive the client,
//! §6), nor a second read; a read may be abandoned.
//!
//! One request of a scope at a time looks up and claims in this process: an exact duplicate
//! that arrives meanwhile waits for it without reading. A storm of duplicates arriving at
//! once then costs the store one lookup and one claim, not one read each queued for the
//! store's connections. If the first one's claim is granted, the duplicates are duplicates of
//! a local execution, which is in flight (what their own read would have found, at a moment
//! after they arrived); otherwise each reads for itself, since the first one's read may
//! predate it (a `forget` completed in between would be missed).

use std::ops::ControlFlow;
use std::sync::Arc;

use axum::body::Body;
use http::Response;
use idemkey_core::{Begin, ClaimRequest, Error, Store, look};

use super::running::{Claiming, Running, Turn};
use crate::answer::answered;
use crate::observe::timed;
use crate::{Config, Prepared};

/// What the lookup made in the request's own task found.
pub(crate) enum Looked {
    /// The record decided: a replay, `key-reused`, or (unless the request is to wait for the
    /// original) `request-in-flight`.
    Answered(Response<Body>),
    /// No record: the request's task claims without looking again.
    Absent(Start),
    /// Anything else (a request in flight to wait for, a duplicate of a local execution):
    /// [`super::flow::run`] decides, waiting where configured.
    Undecided,
}

/// Where [`super::flow::run`] starts.
pub(crate) enum Start {
    /// Look the record up (again).
    Unread,
    /// The request's own lookup found no record: claim, with this process's turn at the
    /// scope if the lookup took it.
    Absent(Option<Claiming>),
}

impl Looked {
    /// Where `run` starts after this lookup; `Break` with the answer when it decided.
    pub(crate) fn start(self) -> ControlFlow<Response<Body>, Start> {
        match self {
            Self::Answered(response) => ControlFlow::Break(response),
            Self::Absent(start) => ControlFlow::Continue(start),
            Self::Undecided => ControlFlow::Continue(Start::Unread),
        }
    }
}

/// The lookup in the request's own task. A duplicate of an execution of this process is not
/// looked up: `run` answers it from the execution. A duplicate of a request of this process
/// that is looking up or claiming waits for it first (see the module's documentation).
pub(crate) async fn look_first<St: Store>(
    store: &St,
    running: &Arc<Running>,
    prepared: &Prepared,
    config: &Config,
) -> Result<Looked, Error> {
    let request = &prepared.claim;
    if running.duplicate(request).is_some() {
        return Ok(Looked::Undecided);
    }
    let turn = match turn_to_look(running, request).await {
        ControlFlow::Break(()) => return Ok(Looked::Undecided),
        ControlFlow::Continue(turn) => turn,
    };
    let looked = look(store, request, config.expired_lease);
    Ok(match timed("lookup", looked).await? {
        None => Looked::Absent(Start::Absent(turn)),
        // Waiting for the original is `run`'s. The turn drops here (and below): the
        // duplicates waiting for it read for themselves.
        Some(Begin::InFlight { .. }) if config.wait_in_flight.is_some() => Looked::Undecided,
        // `look` never claims, so there is no claim to give back.
        Some(begun) => answered(begun, &prepared.parts.headers, config)
            .map_or(Looked::Undecided, Looked::Answered),
    })
}

/// Takes this process's turn at the request's scope before its lookup, if no request has it.
/// If an exact duplicate has it, waits until that one's claim is answered: `Break` when it
/// was granted (the request duplicates a local execution), else `Continue(None)`, to read
/// without the turn (at most one wait, so that replays of one key do not queue in line).
/// Another request of the scope (another body) is the store's to decide: no turn, no wait.
async fn turn_to_look(
    running: &Arc<Running>,
    request: &ClaimRequest,
) -> ControlFlow<(), Option<Claiming>> {
    match running.claiming(request) {
        Turn::First(claiming) => ControlFlow::Continue(Some(claiming)),
        Turn::Other => ControlFlow::Continue(None),
        Turn::After(mut first) => {
            // Its sender drops once the first one's lookup or claim is answered (or its
            // request is gone).
            let _ = first.changed().await;
            if running.duplicate(request).is_some() {
                return ControlFlow::Break(());
            }
            ControlFlow::Continue(None)
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    use bytes::Bytes;
    use idemkey_core::testkit::request_for;
    use idemkey_core::{Claim, MemoryStore, StoredResponse, TryClaim};
    use tokio::time::Instant;

    use super::*;

    fn parts() -> (MemoryStore, Arc<Running>, Config) {
        (MemoryStore::new(), Arc::default(), Config::default())
    }

    fn prepared(body: &str) -> Prepared {
        let (parts, ()) = http::Request::post("/v1/notes")
            .body(())
            .unwrap()
            .into_parts();
        let body = Bytes::copy_from_slice(body.as_bytes());
        let claim = request_for("actor", "create-note", std::str::from_utf8(&body).unwrap());
        Prepared { parts, body, claim }
    }

    /// Polls once: the store here never waits, so `Pending` can only be a wait for another
    /// request of the process.
    fn poll_once<F: Future>(future: std::pin::Pin<&mut F>) -> Poll<F::Output> {
        future.poll(&mut Context::from_waker(Waker::noop()))
    }

    /// The first request of a scope with its turn, taken as `look_first` takes it before
    /// its lookup.
    fn first_turn(running: &Arc<Running>) -> (Prepared, Claiming) {
        let first = prepared("{}");
        let Turn::First(turn) = running.claiming(&first.claim) else {
            panic!("the first request takes the turn");
        };
        (first, turn)
    }

    /// The store's claim of `first`'s scope, as the first request (or another process)
    /// would make it.
    async fn claimed(store: &MemoryStore, first: &Prepared) -> Claim {
        let TryClaim::Claimed(claim) = store.try_claim(&first.claim).await.unwrap() else {
            panic!("the scope is free");
        };
        claim
    }

    /// The first request of a scope holds the turn from before its lookup to its claim's
    /// answer. A duplicate arriving meanwhile does not read: it waits, and once the first's
    /// claim is granted (its execution registered) it is left to `run`, which answers it from
    /// the execution (in flight). Without the wait it would have read the empty record and
    /// gone on to claim.
    #[tokio::test]
    async fn a_duplicate_waits_for_the_first_ones_claim_without_reading() {
        let (store, running, config) = parts();
        let (first, turn) = first_turn(&running);
        let duplicate = prepared("{}");
        let mut looking = pin!(look_first(&store, &running, &duplicate, &config));
        assert!(poll_once(looking.as_mut()).is_pending(), "it waits");

        let claim = claimed(&store, &first).await;
        let executing = running.enter(&first.claim, (Instant::now(), claim.lease));
        drop(turn);
        let looked = looking.await.unwrap();
        assert!(
            matches!(looked, Looked::Undecided),
            "a local execution's duplicate"
        );
        drop(executing);
    }

    /// When the first request's claim is not granted (here it found a completed record), a
    /// duplicate that waited for it reads for itself: the first's read may predate it.
    #[tokio::test]
    async fn a_duplicate_reads_for_itself_when_the_first_ones_claim_is_not_granted() {
        let (store, running, config) = parts();
        let (first, turn) = first_turn(&running);
        let duplicate = prepared("{}");
        let mut looking = pin!(look_first(&store, &running, &duplicate, &config));
        assert!(poll_once(looking.as_mut()).is_pending(), "it waits");

        // Completed meanwhile by another process: the first would replay it.
        let claim = claimed(&store, &first).await;
        let response = StoredResponse::new(201, "{\"id\":\"n1\"}");
        store.complete(&claim, &response).await.unwrap();
        drop(turn);
        let Looked::Answered(replay) = looking.await.unwrap() else {
            panic!("answered from its own read");
        };
        assert_eq!(replay.status(), 201);
        assert_eq!(replay.headers()["idempotent-replayed"], "true");
    }

    /// Another request under the key (another body) does not wait for the first: the store
    /// decides between them.
    #[tokio::test]
    async fn another_request_under_the_key_reads_at_once() {
        let (store, running, config) = parts();
        let first = prepared("{}");
        let _turn = running.claiming(&first.claim);
        let other = prepared("{\"other\":true}");
        let mut looking = pin!(look_first(&store, &running, &other, &config));
        let Poll::Ready(looked) = poll_once(looking.as_mut()) else {
            panic!("it does not wait");
        };
        assert!(matches!(
            looked.unwrap(),
            Looked::Absent(Start::Absent(None))
        ));
    }
}
