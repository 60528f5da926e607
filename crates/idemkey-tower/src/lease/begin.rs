//! Beginning a keyed request in lease mode: its turn at the scope, the lookup, the claim, and
//! the wait for an original in flight (behaviour [§5](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#5-decisions)).
//!
//! A request has one [`Beginning`], which carries it, and its turn, from its lookup to its
//! claim. The lookup is made in the request's own task ([`Beginning::lookup`]): a replay, a
//! mismatch or (unless the request is to wait for the original) a request in flight needs no
//! task of its own (only the work from the claim on must outlive the client, §6), and a read
//! may be abandoned. The claim is made in the request's task of its own
//! ([`Beginning::claim`]).
//!
//! One request of a scope at a time looks up and claims in this process
//! ([`Beginning::take_turn`]):
//! an exact duplicate that arrives meanwhile waits for it without reading. A storm of
//! duplicates arriving at once then costs the store one lookup and one claim, not one read
//! each queued for the store's connections. If the first one's claim is granted, the
//! duplicates are duplicates of a local execution, which is in flight (what their own read
//! would have found, at a moment after they arrived); otherwise each reads for itself, since
//! the first one's read may predate it (a `forget` completed in between would be missed).
//! Nothing is answered on the word of another request but "in flight", which the store would
//! answer too.

use std::ops::ControlFlow;
use std::time::Duration;

use crate::Body;
use http::Response;
use idemkey_core::{
    Begin, ClaimRequest, Decision, Error, OwnerId, Store, begin, claim, decide, lookup, retry_after,
};
use tokio::sync::watch;
// tokio's clock, not std's: the same outside tests, and virtual under a paused runtime (the
// simulation of crates/idemkey-sim), so that a wait for an in-flight original is bounded there too.
use tokio::time::Instant;

use super::local::{Local, OwnTurn, Turn};
use super::shared::Shared;
use crate::Prepared;
use crate::answer::answered;
use crate::observe::timed;

const FIRST_POLL: Duration = Duration::from_millis(10);
const MAX_POLL: Duration = Duration::from_millis(250);

/// One keyed request on its way to its claim: built once, in the request's own task, for its
/// lookup, then moved into its task of its own for the claim. What it asks of the store,
/// what this process is doing and the layer's settings come from its layer's [`Shared`].
pub(crate) struct Beginning {
    prepared: Prepared,
    /// This process's turn at the scope while the request holds it: taken before its lookup
    /// (or, if the lookup did not take it, before its claim), and held until its claim is
    /// answered, or, when it was granted, until the execution is registered.
    turn: Option<OwnTurn>,
    /// Whether the lookup found no record: the claim does not look it up again.
    absent: bool,
    /// Until when a duplicate of a request in flight waits for it: set by [`Self::claim`].
    deadline: Option<Instant>,
}

impl Beginning {
    /// `prepared`, to begin.
    pub(crate) fn new(prepared: Prepared) -> Self {
        Self {
            prepared,
            turn: None,
            absent: false,
            deadline: None,
        }
    }

    fn request(&self) -> &ClaimRequest {
        &self.prepared.claim
    }

    /// The claim is to name `owner`, whose heartbeat the store has: set before the claim.
    pub(crate) fn owned_by(&mut self, owner: Option<OwnerId>) {
        self.prepared.claim.owner = owner;
    }

    /// The request, and this process's turn at its scope if it still holds it (see
    /// [`Self::claim`]).
    pub(crate) fn into_parts(self) -> (Prepared, Option<OwnTurn>) {
        (self.prepared, self.turn)
    }

    /// The lookup in the request's own task: `Break` with the answer when the record decided
    /// (a replay, `key-reused`, or, unless the request is to wait, `request-in-flight`), else
    /// the request on its way to its claim. A duplicate of an execution of this process is
    /// not looked up: the claim step answers it from the execution.
    pub(crate) async fn lookup<St: Store>(
        mut self,
        shared: &Shared<St>,
    ) -> Result<ControlFlow<Response<Body>, Self>, Error> {
        if shared.local.duplicate(self.request()).is_some() {
            return Ok(ControlFlow::Continue(self));
        }
        if self.take_turn(&shared.local).await.is_break() {
            return Ok(ControlFlow::Continue(self));
        }
        Ok(match self.read(shared).await? {
            None => {
                self.absent = true;
                ControlFlow::Continue(self)
            }
            // Waiting for the original is the claim step's. The turn drops here (and below):
            // the duplicates waiting for it read for themselves.
            Some(Begin::InFlight { .. }) if shared.config.wait_in_flight.is_some() => {
                self.turn = None;
                ControlFlow::Continue(self)
            }
            // `lookup` never claims, so there is no claim to give back.
            Some(begun) => match answered(begun, &self.prepared.parts.headers, &shared.config) {
                Ok(answer) => ControlFlow::Break(answer),
                Err(_) => {
                    self.turn = None;
                    ControlFlow::Continue(self)
                }
            },
        })
    }

    /// The claim, in the request's task of its own, after `lookup`: answered here first for a
    /// duplicate of a local execution, and a request in flight waited for until the deadline
    /// if one is configured, polling the record with a growing backoff until it is no longer
    /// in flight or time is up. A granted claim leaves the request with this process's turn
    /// at the scope, to drop once the execution is registered. A failed claim leaves it with
    /// the turn too, if it was held: the claim may stand all the same, and only while the
    /// turn is held can it be told from another request's of this process.
    pub(crate) async fn claim<St: Store>(&mut self, shared: &Shared<St>) -> Result<Begin, Error> {
        self.deadline = shared
            .config
            .wait_in_flight
            .map(|bound| Instant::now() + bound);
        let mut begun = self.claim_once(shared).await?;
        let Some(deadline) = self.deadline else {
            return Ok(begun);
        };
        if let Begin::Execute(_) = begun {
            return Ok(begun);
        }
        self.turn = None;
        let mut poll = FIRST_POLL;
        while let Begin::InFlight { .. } = begun {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            tokio::time::sleep(poll.min(left)).await;
            poll = (poll * 2).min(MAX_POLL);
            begun = self.poll(shared).await?;
        }
        Ok(begun)
    }

    /// One poll of a record in flight: still in flight, or what [`begin`] makes of it.
    async fn poll<St: Store>(&self, shared: &Shared<St>) -> Result<Begin, Error> {
        let (request, expired) = (self.request(), shared.config.expired_lease);
        let record = timed("lookup", shared.store.lookup(&request.scope)).await?;
        if let Some(Decision::InFlight { retry_after }) =
            record.map(|record| decide(request, &record, expired))
        {
            return Ok(Begin::InFlight { retry_after });
        }
        timed("begin", begin(&shared.store, request, expired)).await
    }

    /// The first attempt: the record read unless `lookup` found it absent, then the claim
    /// with this process's turn at the scope (unless the lookup already took it).
    async fn claim_once<St: Store>(&mut self, shared: &Shared<St>) -> Result<Begin, Error> {
        if let Some(in_flight) = self.in_flight_here(shared).await {
            self.turn = None;
            return Ok(in_flight);
        }
        // Without the turn the lookup took: the record read unless it was found absent, then
        // the turn taken before the claim.
        if self.turn.is_none() {
            if !self.absent
                && let Some(answer) = self.read(shared).await?
            {
                return Ok(answer);
            }
            if let Some(in_flight) = self.turn_to_claim(shared).await {
                return Ok(in_flight);
            }
        }
        let expired = shared.config.expired_lease;
        timed("claim", claim(&shared.store, self.request(), expired)).await
    }

    /// The turn before the claim, for a request whose lookup did not take it: `Some` with
    /// the answer of a duplicate of the local execution that the turn's holder began.
    async fn turn_to_claim<St: Store>(&mut self, shared: &Shared<St>) -> Option<Begin> {
        match self.take_turn(&shared.local).await {
            ControlFlow::Continue(()) => None,
            ControlFlow::Break(()) => self.in_flight_here(shared).await,
        }
    }

    /// Takes this process's turn at the request's scope, if no request has it. If an exact
    /// duplicate has it, waits until that one's claim is answered: `Break` when it was granted
    /// (the request duplicates a local execution), else `Continue`, to go on without the turn
    /// (at most one wait, so that replays of one key do not queue in line). Another request
    /// of the scope (another body) is the store's to decide: no turn, no wait.
    async fn take_turn(&mut self, local: &Local) -> ControlFlow<()> {
        match local.turn(self.request()) {
            Turn::Lead(turn) => self.turn = Some(turn),
            Turn::Other(_) => {}
            Turn::Follow(mut first) => {
                // The first one's turn hands on nothing: this returns once its lookup or
                // claim is answered (or its request is gone).
                first.handed_on().await;
                if local.duplicate(self.request()).is_some() {
                    return ControlFlow::Break(());
                }
            }
        }
        ControlFlow::Continue(())
    }

    /// The one read of the record before a claim: what it answers without a write, if the
    /// store looks first.
    async fn read<St: Store>(&self, shared: &Shared<St>) -> Result<Option<Begin>, Error> {
        let looked = lookup(&shared.store, self.request(), shared.config.expired_lease);
        timed("lookup", looked).await
    }

    /// A duplicate of an execution of this process waits for it here, if it may wait at
    /// all: in flight if the execution runs on past the deadline (at once without one);
    /// `None` when there is none or it ended, and the store is to be asked.
    async fn in_flight_here<St: Store>(&self, shared: &Shared<St>) -> Option<Begin> {
        let here = shared.local.duplicate(self.request())?;
        if wait_for_local(here, self.deadline).await {
            return None;
        }
        let retry_after = retry_after(shared.config.lease);
        Some(Begin::InFlight { retry_after })
    }
}

/// Waits, until `deadline` if any, for an execution of this process that the request
/// duplicates. Whether it ended (so the store now knows its outcome).
async fn wait_for_local(mut ended: watch::Receiver<()>, deadline: Option<Instant>) -> bool {
    let Some(deadline) = deadline else {
        return false;
    };
    // `changed` fails once the execution's sender is dropped: that is its end.
    tokio::time::timeout_at(deadline, ended.changed())
        .await
        .is_ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::pin::pin;
    use std::sync::Arc;
    use std::task::{Context, Poll, Waker};

    use bytes::Bytes;
    use idemkey_core::testkit::request_for;
    use idemkey_core::{Claim, MemoryStore, StoredResponse, TryClaim};

    use super::*;
    use crate::Config;

    fn shared() -> Shared<MemoryStore> {
        Shared::new(MemoryStore::new(), Config::default())
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

    /// The first request of a scope with its turn, taken as `lookup` takes it before its
    /// read.
    fn first_turn(local: &Arc<Local>) -> (Prepared, OwnTurn) {
        let first = prepared("{}");
        let Turn::Lead(turn) = local.turn(&first.claim) else {
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
    /// claim is granted (its execution registered) it is left to the claim step, which
    /// answers it from the execution (in flight). Without the wait it would have read the
    /// empty record and gone on to claim.
    #[tokio::test]
    async fn a_duplicate_waits_for_the_first_ones_claim_without_reading() {
        let layer = shared();
        let (first, turn) = first_turn(&layer.local);
        let mut looking = pin!(Beginning::new(prepared("{}")).lookup(&layer));
        assert!(poll_once(looking.as_mut()).is_pending(), "it waits");

        let claim = claimed(&layer.store, &first).await;
        let executing = layer
            .local
            .enter(&first.claim, (Instant::now(), claim.lease));
        drop(turn);
        let ControlFlow::Continue(looked) = looking.await.unwrap() else {
            panic!("left to the claim step");
        };
        assert!(
            !looked.absent && looked.turn.is_none(),
            "a local execution's duplicate, unread"
        );
        drop(executing);
    }

    /// When the first request's claim is not granted (here it found a completed record), a
    /// duplicate that waited for it reads for itself: the first's read may predate it.
    #[tokio::test]
    async fn a_duplicate_reads_for_itself_when_the_first_ones_claim_is_not_granted() {
        let layer = shared();
        let (first, turn) = first_turn(&layer.local);
        let mut looking = pin!(Beginning::new(prepared("{}")).lookup(&layer));
        assert!(poll_once(looking.as_mut()).is_pending(), "it waits");

        // Completed meanwhile by another process: the first would replay it.
        let claim = claimed(&layer.store, &first).await;
        let response = StoredResponse::new(201, "{\"id\":\"n1\"}");
        layer.store.complete(&claim, &response).await.unwrap();
        drop(turn);
        let ControlFlow::Break(replay) = looking.await.unwrap() else {
            panic!("answered from its own read");
        };
        assert_eq!(replay.status(), 201);
        assert_eq!(replay.headers()["idempotent-replayed"], "true");
    }

    /// Another request under the key (another body) does not wait for the first: the store
    /// decides between them.
    #[tokio::test]
    async fn another_request_under_the_key_reads_at_once() {
        let layer = shared();
        let first = prepared("{}");
        let _turn = layer.local.turn(&first.claim);
        let other = prepared("{\"other\":true}");
        let mut looking = pin!(Beginning::new(other).lookup(&layer));
        let Poll::Ready(looked) = poll_once(looking.as_mut()) else {
            panic!("it does not wait");
        };
        let ControlFlow::Continue(looked) = looked.unwrap() else {
            panic!("no record to answer from");
        };
        assert!(looked.absent && looked.turn.is_none());
    }

    /// A request whose lookup found no record while an exact duplicate of this process holds
    /// the turn (it read without the turn, after the request it waited for went away) waits
    /// for that one's claim instead of sending a claim of its own; the claim granted, it is a
    /// duplicate of a local execution: in flight. Without the wait it would have claimed the
    /// free scope (the store here never waits, so the first poll would have ended).
    #[tokio::test]
    async fn a_duplicate_that_read_waits_for_the_claim_in_progress() {
        let layer = shared();
        let (first, turn) = first_turn(&layer.local);
        let mut duplicate = Beginning {
            absent: true,
            ..Beginning::new(prepared("{}"))
        };
        let begun = {
            let mut claiming = pin!(duplicate.claim_once(&layer));
            assert!(
                poll_once(claiming.as_mut()).is_pending(),
                "it waits instead of claiming"
            );
            let claim = claimed(&layer.store, &first).await;
            let executing = layer
                .local
                .enter(&first.claim, (Instant::now(), claim.lease));
            drop(turn);
            let begun = claiming.await.unwrap();
            drop(executing);
            begun
        };
        assert!(matches!(begun, Begin::InFlight { .. }), "in flight");
        assert!(duplicate.turn.is_none());
    }
}
