//! [`Idempotency`]: the lease-mode middleware service, and the path of one request through
//! the steps: prepare, begin (turn, lookup, claim), execute, settle, answer.

use std::mem;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::Body;
use bytes::Bytes;
use http::{Request, Response};
use http_body::Body as HttpBody;
use idemkey_core::{BoxError, Claim, Error, Store, Verdict};
// tokio's clock: see `begin`.
use tokio::time::Instant;
use tower::Service;
use tracing::{Instrument, Span, field};

use super::begin::Beginning;
use super::execute::{Claimed, execute};
use super::orphan;
use super::shared::Shared;
use crate::answer::{answered, joined, rejected, store_error};
use crate::observe::timed;
use crate::policy::judge;
use crate::tx::MaybeTransactions;
use crate::{Config, Preparation, ResponseFuture, prepare};

/// Middleware that makes requests carrying an `Idempotency-Key` idempotent, in lease mode.
///
/// A request with a valid key is fingerprinted and claimed in the store; a retry of a
/// completed request gets the stored response, a different request under the same key gets
/// `key-reused`, and a duplicate of a running one gets `request-in-flight`. The claiming
/// request runs the inner service in a task of its own, so it finishes (and its response is
/// stored or the claim released) even if the caller stops waiting. Store failures become
/// problem responses, never errors: the service's error is the inner service's.
#[derive(Clone, Debug)]
pub struct Idempotency<S, St> {
    inner: S,
    shared: Shared<St>,
}

impl<S, St> Idempotency<S, St> {
    /// Wraps `inner`, keeping records in `store`.
    pub fn new(inner: S, store: St, config: Config) -> Self {
        Self::from_shared(inner, Shared::new(store, config))
    }

    /// A service of a layer, sharing what the layer's services share.
    pub(crate) fn from_shared(inner: S, shared: Shared<St>) -> Self {
        Self { inner, shared }
    }

    /// What its requests share.
    #[cfg(feature = "sqlx")]
    pub(crate) fn shared_mut(&mut self) -> &mut Shared<St> {
        &mut self.shared
    }
}

impl<S, St, ReqBody, ResBody> Service<Request<ReqBody>> for Idempotency<S, St>
where
    S: Service<Request<Body>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    St: Store,
    ReqBody: HttpBody<Data = Bytes> + Send + 'static,
    ReqBody::Error: Into<BoxError>,
    ResBody: HttpBody<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // The readied service handles this request; the clone waits for the next poll_ready.
        let clone = self.inner.clone();
        let inner = mem::replace(&mut self.inner, clone);
        // Requests without a key pass through: they pay for no span.
        let config = &self.shared.config;
        let keyed = request.headers().contains_key(&config.key_header);
        let span = if keyed && config.honours(request.method()) {
            tracing::info_span!(
                "idempotency",
                operation = field::Empty,
                key = field::Empty,
                outcome = field::Empty,
            )
        } else {
            Span::none()
        };
        let shared = self.shared.clone();
        let handled = handle(inner, shared, request);
        ResponseFuture::new(handled.instrument(span))
    }
}

/// One request, from its preparation to its answer.
async fn handle<S, St, ReqBody, ResBody>(
    mut inner: S,
    shared: Shared<St>,
    request: Request<ReqBody>,
) -> Result<Response<Body>, S::Error>
where
    S: Service<Request<Body>, Response = Response<ResBody>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    St: Store,
    ReqBody: HttpBody<Data = Bytes> + Send + 'static,
    ReqBody::Error: Into<BoxError>,
    ResBody: HttpBody<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    let mut prepared = match prepare(request, &shared.config).await {
        Preparation::Ready(prepared) => *prepared,
        Preparation::Unrecorded(request) if shared.transactions.0.is_some() => {
            let (transactions, config) = (shared.transactions, shared.config);
            let unrecorded = unrecorded(inner, request.map(Body::new), transactions, config);
            return joined(shared.executions.spawn(unrecorded.in_current_span()).await);
        }
        Preparation::PassThrough(request) | Preparation::Unrecorded(request) => {
            let response = inner.call(request.map(Body::new)).await?;
            return Ok(response.map(Body::new));
        }
        Preparation::Rejected(rejection) => return Ok(rejected(&rejection, &shared.noticed)),
    };
    let span = Span::current();
    span.record("operation", field::display(&prepared.claim.operation));
    span.record("key", prepared.claim.scope.key.short_hash());
    if let Some(heartbeat) = &shared.liveness {
        heartbeat.start_soon(&shared.store);
    }
    // The claim's flush, by default, waits for the handler's first derived key (`keys.rs`).
    prepared.claim.flush = shared.config.claim_flush;
    let beginning = match Beginning::new(prepared).lookup(&shared).await {
        Ok(ControlFlow::Continue(beginning)) => beginning,
        Ok(ControlFlow::Break(answer)) => return Ok(answer),
        Err(err) => return Ok(store_error(&err)),
    };
    // From the claim on, the work belongs to a task of its own: a dropped response future
    // (client gone, timeout layer) must not abandon a claim or a handler half-way (§6).
    let executions = shared.executions.clone();
    let claimed = claim_and_execute(inner, beginning, shared);
    joined(executions.spawn(claimed.in_current_span()).await)
}

/// In the request's task of its own: claims (see [`Beginning::claim`]), then executes under
/// the claim if it was granted; answers otherwise.
async fn claim_and_execute<S, St, ResBody>(
    inner: S,
    mut beginning: Beginning,
    shared: Shared<St>,
) -> Result<Response<Body>, S::Error>
where
    S: Service<Request<Body>, Response = Response<ResBody>>,
    St: Store,
    ResBody: HttpBody<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    // Before the claim: a claim must never be made without the keys its handler needs.
    let secret = match secret(&shared.store, &shared.config).await {
        Ok(secret) => secret,
        Err(err) => return Ok(store_error(&err)),
    };
    // Also before the claim: a claim names an owner whose heartbeat the store has.
    let owner = match &shared.liveness {
        Some(heartbeat) => match heartbeat.liveness().owner(&shared.store).await {
            Ok((owner, mark)) => Some((owner, mark)),
            Err(err) => return Ok(store_error(&err)),
        },
        None => None,
    };
    beginning.owned_by(owner.as_ref().map(|(owner, _)| *owner));
    let begun = beginning.claim(&shared).await;
    let (prepared, turn) = beginning.into_parts();
    let begun = match begun {
        Ok(begun) => begun,
        Err(error) => {
            let answer = store_error(&error);
            if let (Some((owner, _)), Some(turn)) = (owner, turn) {
                // Off the answer's path: the store may be slow to tell.
                let (store, local) = (shared.store.clone(), shared.local.clone());
                tokio::spawn(async move {
                    let request = (&prepared.claim, owner);
                    orphan::give_back(&store, &local, request, turn).await;
                });
            }
            return Ok(answer);
        }
    };
    let claim = match answered(begun, &prepared.parts.headers, &shared.config) {
        Ok(response) => return Ok(response),
        Err(claim) => claim,
    };
    if let Some((_, mark)) = &owner
        && !mark.live()
    {
        return Ok(gave_back(&shared.store, &claim).await);
    }
    if claim.taken_over {
        tracing::warn!("took over an expired lease: executing again");
    }
    // The store stamps `acquired` before it sends the claim, so the lease it granted ends
    // after `acquired + lease` (std's clock: under a paused tokio clock the mark then runs
    // out early, which only sends duplicates to the store).
    let asked = Instant::from_std(claim.acquired);
    let execution = shared.local.enter(&prepared.claim, (asked, claim.lease));
    if let Some((_, mark)) = owner {
        execution.lease().owned_by(mark);
    }
    // Registered: duplicates that waited for this claim now find the execution.
    drop(turn);
    let claimed = Claimed {
        claim,
        secret,
        execution,
    };
    execute(inner, prepared.into_request(), claimed, shared).await
}

/// A claim granted after its owner's heartbeat lapsed (it waited for the writer, a
/// connection or a lock, or the host was suspended): others may take it over at once, so
/// nothing runs under it. Given back, best effort, so that a retry may claim it again, and
/// answered 503 `store-unavailable`.
async fn gave_back<St: Store>(store: &St, claim: &Claim) -> Response<Body> {
    tracing::warn!("the owner heartbeat lapsed while the claim was being made; giving it back");
    if let Err(err) = timed("release", store.release(claim)).await {
        tracing::warn!(error = %err, "could not give back a claim made after the owner lapsed");
    }
    store_error(&Error::Unavailable(
        "this process's owner heartbeat lapsed while the claim was made".into(),
    ))
}

/// The secret behind derived keys: the configured one, else the store's (which the store
/// caches, so this is a read of memory after the first request: not worth a latency sample).
async fn secret<St: Store>(store: &St, config: &Config) -> Result<Arc<[u8]>, Error> {
    match &config.secret {
        Some(secret) => Ok(secret.clone()),
        None => store.secret().await,
    }
}

/// A request without a key on a transactional route: the handler's transaction, if it
/// began one, commits when the policy would have stored its answer, and rolls back
/// otherwise. Only a failed commit replaces the handler's answer.
async fn unrecorded<S, ResBody>(
    mut inner: S,
    mut request: Request<Body>,
    transactions: MaybeTransactions,
    config: Arc<Config>,
) -> Result<Response<Body>, S::Error>
where
    S: Service<Request<Body>, Response = Response<ResBody>>,
    ResBody: HttpBody<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    let offered = transactions.offer(request.extensions_mut());
    let answered = inner.call(request).await;
    let (keep, answered) = match answered {
        Ok(response) => {
            let (verdict, response) = judge(config.status_policy.as_ref(), response);
            (verdict == Verdict::Store, Ok(response.map(Body::new)))
        }
        Err(err) => (false, Err(err)),
    };
    let Some(offered) = offered else {
        return answered;
    };
    match offered.finish(keep).await {
        Ok(()) => answered,
        Err(err) => Ok(store_error(&err)),
    }
}
