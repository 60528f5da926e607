//! Beginning a keyed request in lease mode: its turn at the scope, the lookup, the claim, and
//! the wait for an original in flight (behaviour [§5](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#5-decisions)).
//!
//! The lookup is made in the request's own task ([`Beginning::lookup`]): a replay, a
//! mismatch or (unless the request is to wait for the original) a request in flight needs no
//! task of its own (only the work from the claim on must outlive the client, §6), and a read
//! may be abandoned. The claim is made in the request's task of its own
//! ([`Beginning::claim`]).
//!
//! One request of a scope at a time looks up and claims in this process ([`Beginning::turn`]):
//! an exact duplicate that arrives meanwhile waits for it without reading. A storm of
//! duplicates arriving at once then costs the store one lookup and one claim, not one read
//! each queued for the store's connections. If the first one's claim is granted, the
//! duplicates are duplicates of a local execution, which is in flight (what their own read
//! would have found, at a moment after they arrived); otherwise each reads for itself, since
//! the first one's read may predate it (a `forget` completed in between would be missed).
//! Nothing is answered on the word of another request but "in flight", which the store would
//! answer too.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use crate::Body;
use http::Response;
use idemkey_core::{
    Begin, ClaimRequest, Decision, Error, Store, begin, claim, decide, lookup, retry_after,
};
use tokio::sync::watch;
// tokio's clock, not std's: the same outside tests, and virtual under a paused runtime (the
// simulation of crates/idemkey-sim), so that a wait for an in-flight original is bounded there too.
use tokio::time::Instant;

use super::local::{Local, OwnTurn, Turn};
use super::shared::Shared;
use crate::answer::answered;
use crate::observe::timed;
use crate::{Config, Prepared};

const FIRST_POLL: Duration = Duration::from_millis(10);
const MAX_POLL: Duration = Duration::from_millis(250);

/// A claim step that failed: the store's error, and this process's turn at the scope if the
/// request held it when its claim failed.
#[derive(Debug)]
pub(crate) struct Failed {
    pub(crate) error: Error,
    pub(crate) turn: Option<OwnTurn>,
}

impl Failed {
    /// A failure before any claim of the request was sent, or without the turn.
    fn without_turn(error: Error) -> Self {
        Self { error, turn: None }
    }
}

/// What the lookup in the request's own task left to its claim.
#[derive(Debug)]
pub(crate) enum Lookup {
    /// Not decided by the lookup (a request in flight to wait for, a duplicate of a local
    /// execution): the claim step looks the record up (again).
    Unread,
    /// No record: claim without looking again, with this process's turn at the scope if
    /// the lookup took it.
    Absent(Option<OwnTurn>),
}

/// One keyed request on its way to its claim, and what it asks: the store, what this
/// process is doing for the layer, and the layer's settings.
pub(crate) struct Beginning<'a, St> {
    store: &'a St,
    local: &'a Arc<Local>,
    prepared: &'a Prepared,
    config: &'a Config,
    /// Until when a duplicate of a request in flight waits for it: set by [`Self::claim`].
    deadline: Option<Instant>,
}

impl<'a, St: Store> Beginning<'a, St> {
    /// `prepared`, to begin with what its layer's requests share.
    pub(crate) fn new(shared: &'a Shared<St>, prepared: &'a Prepared) -> Self {
        Self {
            store: &shared.store,
            local: &shared.local,
            prepared,
            config: &shared.config,
            deadline: None,
        }
    }

    fn request(&self) -> &ClaimRequest {
        &self.prepared.claim
    }

    /// The lookup in the request's own task: `Break` with the answer when the record decided
    /// (a replay, `key-reused`, or, unless the request is to wait, `request-in-flight`). A
    /// duplicate of an execution of this process is not looked up: the claim step answers it
    /// from the execution.
    pub(crate) async fn lookup(&self) -> Result<ControlFlow<Response<Body>, Lookup>, Error> {
        if self.local.duplicate(self.request()).is_some() {
            return Ok(ControlFlow::Continue(Lookup::Unread));
        }
        let ControlFlow::Continue(turn) = self.turn().await else {
            return Ok(ControlFlow::Continue(Lookup::Unread));
        };
        Ok(match self.read().await? {
            None => ControlFlow::Continue(Lookup::Absent(turn)),
            // Waiting for the original is the claim step's. The turn drops here (and below):
            // the duplicates waiting for it read for themselves.
            Some(Begin::InFlight { .. }) if self.config.wait_in_flight.is_some() => {
                ControlFlow::Continue(Lookup::Unread)
            }
            // `lookup` never claims, so there is no claim to give back.
            Some(begun) => match answered(begun, &self.prepared.parts.headers, self.config) {
                Ok(answer) => ControlFlow::Break(answer),
                Err(_) => ControlFlow::Continue(Lookup::Unread),
            },
        })
    }

    /// The claim, in the request's task of its own, after `lookup`: answered here first for a
    /// duplicate of a local execution, and a request in flight waited for until the deadline
    /// if one is configured, polling the record with a growing backoff until it is no longer
    /// in flight or time is up. A granted claim comes with this process's turn at the scope,
    /// to drop once the execution is registered. A failed claim comes with the turn too, if
    /// it was held: the claim may stand all the same, and only while the turn is held can it
    /// be told from another request's of this process.
    pub(crate) async fn claim(
        &mut self,
        lookup: Lookup,
    ) -> Result<(Begin, Option<OwnTurn>), Failed> {
        self.deadline = self
            .config
            .wait_in_flight
            .map(|bound| Instant::now() + bound);
        let (mut begun, turn) = self.claim_once(lookup).await?;
        let Some(deadline) = self.deadline else {
            return Ok((begun, turn));
        };
        if let Begin::Execute(_) = begun {
            return Ok((begun, turn));
        }
        drop(turn);
        let mut poll = FIRST_POLL;
        while let Begin::InFlight { .. } = begun {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            tokio::time::sleep(poll.min(left)).await;
            poll = (poll * 2).min(MAX_POLL);
            begun = self.poll().await.map_err(Failed::without_turn)?;
        }
        Ok((begun, None))
    }

    /// One poll of a record in flight: still in flight, or what [`begin`] makes of it.
    async fn poll(&self) -> Result<Begin, Error> {
        let (request, expired) = (self.request(), self.config.expired_lease);
        let record = timed("lookup", self.store.lookup(&request.scope)).await?;
        if let Some(Decision::InFlight { retry_after }) =
            record.map(|record| decide(request, &record, expired))
        {
            return Ok(Begin::InFlight { retry_after });
        }
        timed("begin", begin(self.store, request, expired)).await
    }

    /// The first attempt: the record read unless `lookup` found it absent, then the claim
    /// with this process's turn at the scope (unless the lookup already took it).
    async fn claim_once(&self, lookup: Lookup) -> Result<(Begin, Option<OwnTurn>), Failed> {
        if let Some(in_flight) = self.in_flight_here().await {
            return Ok((in_flight, None));
        }
        let turn = match lookup {
            // The lookup in the request's own task took the turn already.
            Lookup::Absent(Some(turn)) => Some(turn),
            lookup => {
                if let Lookup::Unread = lookup
                    && let Some(answer) = self.read().await.map_err(Failed::without_turn)?
                {
                    return Ok((answer, None));
                }
                match self.turn_to_claim().await {
                    Ok(turn) => turn,
                    Err(in_flight) => return Ok((in_flight, None)),
                }
            }
        };
        let request = self.request();
        let begun = timed(
            "claim",
            claim(self.store, request, self.config.expired_lease),
        )
        .await;
        match begun {
            Ok(begun) => Ok((begun, turn)),
            Err(error) => Err(Failed { error, turn }),
        }
    }

    /// The turn before the claim, for a request whose lookup did not take it: `Err` with the
    /// answer of a duplicate of the local execution that the turn's holder began.
    async fn turn_to_claim(&self) -> Result<Option<OwnTurn>, Begin> {
        match self.turn().await {
            ControlFlow::Continue(turn) => Ok(turn),
            ControlFlow::Break(()) => match self.in_flight_here().await {
                Some(in_flight) => Err(in_flight),
                None => Ok(None),
            },
        }
    }

    /// This process's turn at the request's scope, if no request has it. If an exact
    /// duplicate has it, waits until that one's claim is answered: `Break` when it was granted
    /// (the request duplicates a local execution), else `Continue(None)`, to go on without the
    /// turn (at most one wait, so that replays of one key do not queue in line). Another
    /// request of the scope (another body) is the store's to decide: no turn, no wait.
    async fn turn(&self) -> ControlFlow<(), Option<OwnTurn>> {
        match self.local.turn(self.request()) {
            Turn::Lead(turn) => ControlFlow::Continue(Some(turn)),
            Turn::Other(_) => ControlFlow::Continue(None),
            Turn::Follow(mut first) => {
                // The first one's turn settles nothing: this returns once its lookup or
                // claim is answered (or its request is gone).
                first.settled().await;
                if self.local.duplicate(self.request()).is_some() {
                    return ControlFlow::Break(());
                }
                ControlFlow::Continue(None)
            }
        }
    }

    /// The one read of the record before a claim: what it answers without a write, if the
    /// store looks first.
    async fn read(&self) -> Result<Option<Begin>, Error> {
        let looked = lookup(self.store, self.request(), self.config.expired_lease);
        timed("lookup", looked).await
    }

    /// A duplicate of an execution of this process waits for it here, if it may wait at
    /// all: in flight if the execution runs on past the deadline (at once without one);
    /// `None` when there is none or it ended, and the store is to be asked.
    async fn in_flight_here(&self) -> Option<Begin> {
        let here = self.local.duplicate(self.request())?;
        if wait_for_local(here, self.deadline).await {
            return None;
        }
        let retry_after = retry_after(self.config.lease);
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
    use std::task::{Context, Poll, Waker};

    use bytes::Bytes;
    use idemkey_core::testkit::request_for;
    use idemkey_core::{Claim, MemoryStore, StoredResponse, TryClaim};

    use super::*;

    fn parts() -> (MemoryStore, Arc<Local>, Config) {
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

    fn beginning<'a>(
        (store, local, config): &'a (MemoryStore, Arc<Local>, Config),
        prepared: &'a Prepared,
    ) -> Beginning<'a, MemoryStore> {
        Beginning {
            store,
            local,
            prepared,
            config,
            deadline: None,
        }
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
        let layer = parts();
        let (first, turn) = first_turn(&layer.1);
        let duplicate = prepared("{}");
        let beginning = beginning(&layer, &duplicate);
        let mut looking = pin!(beginning.lookup());
        assert!(poll_once(looking.as_mut()).is_pending(), "it waits");

        let claim = claimed(&layer.0, &first).await;
        let executing = layer.1.enter(&first.claim, (Instant::now(), claim.lease));
        drop(turn);
        let looked = looking.await.unwrap();
        assert!(
            matches!(looked, ControlFlow::Continue(Lookup::Unread)),
            "a local execution's duplicate"
        );
        drop(executing);
    }

    /// When the first request's claim is not granted (here it found a completed record), a
    /// duplicate that waited for it reads for itself: the first's read may predate it.
    #[tokio::test]
    async fn a_duplicate_reads_for_itself_when_the_first_ones_claim_is_not_granted() {
        let layer = parts();
        let (first, turn) = first_turn(&layer.1);
        let duplicate = prepared("{}");
        let beginning = beginning(&layer, &duplicate);
        let mut looking = pin!(beginning.lookup());
        assert!(poll_once(looking.as_mut()).is_pending(), "it waits");

        // Completed meanwhile by another process: the first would replay it.
        let claim = claimed(&layer.0, &first).await;
        let response = StoredResponse::new(201, "{\"id\":\"n1\"}");
        layer.0.complete(&claim, &response).await.unwrap();
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
        let layer = parts();
        let first = prepared("{}");
        let _turn = layer.1.turn(&first.claim);
        let other = prepared("{\"other\":true}");
        let beginning = beginning(&layer, &other);
        let mut looking = pin!(beginning.lookup());
        let Poll::Ready(looked) = poll_once(looking.as_mut()) else {
            panic!("it does not wait");
        };
        assert!(matches!(
            looked.unwrap(),
            ControlFlow::Continue(Lookup::Absent(None))
        ));
    }

    /// A request whose lookup found no record while an exact duplicate of this process holds
    /// the turn (it read without the turn, after the request it waited for went away) waits
    /// for that one's claim instead of sending a claim of its own; the claim granted, it is a
    /// duplicate of a local execution: in flight. Without the wait it would have claimed the
    /// free scope (the store here never waits, so the first poll would have ended).
    #[tokio::test]
    async fn a_duplicate_that_read_waits_for_the_claim_in_progress() {
        let layer = parts();
        let (first, turn) = first_turn(&layer.1);
        let duplicate = prepared("{}");
        let beginning = beginning(&layer, &duplicate);
        let mut claiming = pin!(beginning.claim_once(Lookup::Absent(None)));
        assert!(
            poll_once(claiming.as_mut()).is_pending(),
            "it waits instead of claiming"
        );

        let claim = claimed(&layer.0, &first).await;
        let executing = layer.1.enter(&first.claim, (Instant::now(), claim.lease));
        drop(turn);
        let (begun, turn) = claiming.await.unwrap();
        assert!(matches!(begun, Begin::InFlight { .. }), "in flight");
        assert!(turn.is_none());
        drop(executing);
    }
}
