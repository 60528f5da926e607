//! The back half of lease mode: ask the store, then replay, reject, wait or execute (§5).

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

// tokio's clock, not std's: the same outside tests, and virtual under a paused runtime (the
// simulation of crates/idemkey-sim), so that a wait for an in-flight original is bounded there too.
use tokio::time::Instant;

use axum::body::Body;
use bytes::Bytes;
use http::{Request, Response};
use http_body::Body as HttpBody;
use idemkey_core::{
    Begin, BoxError, ClaimRequest, Decision, Error, Store, begin, claim, decide, look, retry_after,
};
use tokio::sync::watch;
use tower::Service;

use super::execute::execute;
use super::look::Start;
use super::running::{Claiming, Running, Turn};
use super::transactions::MaybeTransactions;
use crate::answer::{answered, store_error};
use crate::observe::timed;
use crate::{Config, Prepared};

const FIRST_POLL: Duration = Duration::from_millis(10);
const MAX_POLL: Duration = Duration::from_millis(250);

/// Decides what a prepared request gets, and executes it if it holds the claim. `running`
/// answers the duplicates of what this process is executing without asking the store;
/// `transactions` offers the handler a transaction that completes the record. `start`: where
/// [`super::look::look_first`] left the request (with [`Start::Absent`], the first attempt
/// claims without looking again).
pub(crate) async fn run<S, St, ResBody>(
    inner: S,
    (prepared, start): (Prepared, Start),
    (store, running, transactions): (St, Arc<Running>, MaybeTransactions),
    config: Arc<Config>,
) -> Result<Response<Body>, S::Error>
where
    S: Service<Request<Body>, Response = Response<ResBody>>,
    St: Store,
    ResBody: HttpBody<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    // Before the claim: a claim must never be made without the keys its handler needs.
    let secret = match secret(&store, &config).await {
        Ok(secret) => secret,
        Err(err) => return Ok(store_error(&err)),
    };
    let deadline = config.wait_in_flight.map(|bound| Instant::now() + bound);
    let request = (&prepared.claim, start);
    let waited = begin_or_wait((&store, &running), request, &config, deadline).await;
    let (begun, claiming) = match waited {
        Ok(begun) => begun,
        Err(err) => return Ok(store_error(&err)),
    };
    let claim = match answered(begun, &prepared.parts.headers, &config) {
        Ok(response) => return Ok(response),
        Err(claim) => claim,
    };
    if claim.taken_over {
        tracing::warn!("took over an expired lease: executing again");
    }
    // The store stamps `acquired` before it sends the claim, so the lease it granted ends
    // after `acquired + lease` (std's clock: under a paused tokio clock the mark then runs
    // out early, which only sends duplicates to the store).
    let asked = Instant::from_std(claim.acquired);
    let executing = running.enter(&prepared.claim, (asked, claim.lease));
    // Registered: duplicates that waited for this claim now find the execution.
    drop(claiming);
    let request = prepared.into_request();
    let held = (claim, secret, executing);
    execute(inner, request, held, (store, &transactions), config).await
}

/// The secret behind derived keys: the configured one, else the store's (which the store
/// caches, so this is a read of memory after the first request: not worth a latency sample).
async fn secret<St: Store>(store: &St, config: &Config) -> Result<Arc<[u8]>, Error> {
    match &config.secret {
        Some(secret) => Ok(secret.clone()),
        None => store.secret().await,
    }
}

/// A duplicate of an execution of this process waits for it here, if it may wait at all: in
/// flight if the execution runs on past `deadline` (at once without one); `None` when there
/// is none or it ended, and the store is to be asked.
async fn in_flight_here(
    running: &Running,
    request: &ClaimRequest,
    config: &Config,
    deadline: Option<Instant>,
) -> Option<Begin> {
    let here = running.duplicate(request)?;
    if wait_for_local(here, deadline).await {
        return None;
    }
    let retry_after = retry_after(config.lease);
    Some(Begin::InFlight { retry_after })
}

/// Waits, until `deadline` if any, for an execution of this process that `request`
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

/// Runs the decision table; an in-flight answer waits for the original, until `deadline` if
/// one is configured, by polling the record with a growing backoff until it is no longer in
/// flight or time is up. A granted claim comes with its turn, to drop once the execution is
/// registered.
async fn begin_or_wait<St: Store>(
    (store, running): (&St, &Arc<Running>),
    (request, start): (&ClaimRequest, Start),
    config: &Config,
    deadline: Option<Instant>,
) -> Result<(Begin, Option<Claiming>), Error> {
    let here = (request, start);
    let (mut begun, claiming) = begin_here((store, running), here, config, deadline).await?;
    let Some(deadline) = deadline else {
        return Ok((begun, claiming));
    };
    if let Begin::Execute(_) = begun {
        return Ok((begun, claiming));
    }
    drop(claiming);
    let mut poll = FIRST_POLL;
    while let Begin::InFlight { .. } = begun {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        tokio::time::sleep(poll.min(left)).await;
        poll = (poll * 2).min(MAX_POLL);
        let record = timed("lookup", store.lookup(&request.scope)).await?;
        let decision = record.map(|record| decide(request, &record, config.expired_lease));
        if let Some(Decision::InFlight { retry_after }) = decision {
            begun = Begin::InFlight { retry_after };
            continue;
        }
        begun = timed("begin", begin(store, request, config.expired_lease)).await?;
    }
    Ok((begun, None))
}

/// [`begin`], answered here first for a duplicate of a local execution
/// ([`in_flight_here`]), and with one claim of a scope at a time in this process (see
/// [`Running::claiming`]), unless the lookup already took the turn. Nothing is answered on
/// the word of another request but "in flight", which the store would answer too.
async fn begin_here<St: Store>(
    (store, running): (&St, &Arc<Running>),
    (request, start): (&ClaimRequest, Start),
    config: &Config,
    deadline: Option<Instant>,
) -> Result<(Begin, Option<Claiming>), Error> {
    if let Some(in_flight) = in_flight_here(running, request, config, deadline).await {
        return Ok((in_flight, None));
    }
    if matches!(start, Start::Unread) {
        let looked = look(store, request, config.expired_lease);
        if let Some(answer) = timed("lookup", looked).await? {
            return Ok((answer, None));
        }
    }
    let claiming = match start {
        // The request's own lookup took the turn already.
        Start::Absent(Some(turn)) => Some(turn),
        _ => match turn_to_claim(running, request, config, deadline).await {
            ControlFlow::Break(in_flight) => return Ok((in_flight, None)),
            ControlFlow::Continue(claiming) => claiming,
        },
    };
    let begun = timed("claim", claim(store, request, config.expired_lease)).await?;
    Ok((begun, claiming))
}

/// Takes this process's turn to claim the request's scope, if no request has it. An exact
/// duplicate that missed its lookup while another request of this process is claiming waits
/// for that claim's answer: if it was granted, the duplicate is one of a local execution
/// (`Break`: in flight, or it waited for it); otherwise it claims from the store itself.
async fn turn_to_claim(
    running: &Arc<Running>,
    request: &ClaimRequest,
    config: &Config,
    deadline: Option<Instant>,
) -> ControlFlow<Begin, Option<Claiming>> {
    match running.claiming(request) {
        Turn::First(claiming) => ControlFlow::Continue(Some(claiming)),
        Turn::Other => ControlFlow::Continue(None),
        Turn::After(mut first) => {
            // Its sender drops once the first's claim is answered (or its request is gone).
            let _ = first.changed().await;
            match in_flight_here(running, request, config, deadline).await {
                Some(in_flight) => ControlFlow::Break(in_flight),
                None => ControlFlow::Continue(None),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::pin::pin;
    use std::task::{Context, Waker};

    use idemkey_core::testkit::request_for;
    use idemkey_core::{MemoryStore, TryClaim};

    use super::*;

    /// A request whose lookup found no record while an exact duplicate of this process holds
    /// the turn (it read without the turn, after the request it waited for went away) waits
    /// for that one's claim instead of sending a claim of its own; the claim granted, it is a
    /// duplicate of a local execution: in flight. Without the wait it would have claimed the
    /// free scope (the store here never waits, so the first poll would have ended).
    #[tokio::test]
    async fn a_duplicate_that_read_waits_for_the_claim_in_progress() {
        let (store, running, config) = (
            MemoryStore::new(),
            Arc::new(Running::default()),
            Config::default(),
        );
        let first = request_for("actor", "create-note", "{}");
        let Turn::First(turn) = running.claiming(&first) else {
            panic!("the first request takes the turn");
        };
        let duplicate = first.clone();
        let here = (&duplicate, Start::Absent(None));
        let mut beginning = pin!(begin_here((&store, &running), here, &config, None));
        let polled = beginning
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()));
        assert!(polled.is_pending(), "it waits instead of claiming");

        let TryClaim::Claimed(claim) = store.try_claim(&first).await.unwrap() else {
            panic!("the first claims");
        };
        let executing = running.enter(&first, (Instant::now(), claim.lease));
        drop(turn);
        let (begun, claiming) = beginning.await.unwrap();
        assert!(matches!(begun, Begin::InFlight { .. }), "in flight");
        assert!(claiming.is_none());
        drop(executing);
    }
}
