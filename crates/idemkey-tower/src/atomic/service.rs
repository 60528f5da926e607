//! [`AtomicIdempotency`]: the service of [`super::AtomicIdempotencyLayer`].

use std::marker::PhantomData;
use std::mem;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::Body;
use bytes::Bytes;
use http::{Request, Response};
use http_body::Body as HttpBody;
use idemkey_core::{BoxError, Verdict};
use idemkey_sqlx::{AtomicLookup, AtomicOptions, Backend, Strategy};
use tower::{Service, ServiceExt};
use tracing::{Instrument, field};

use super::handler::{HandlerError, HttpOutput, ServiceHandler};
use super::shared::{Plan, Shared};
use crate::answer::{answer_outcome, handler_failed, rejected, store_error};
use crate::observe::{outcome, store_latency};
use crate::policy::judge;
use crate::tx::{TxOffer, TxSlot, end};
use crate::{Config, Preparation, Prepared, ResponseFuture, prepare, problem_response};

/// Middleware that runs each keyed request in atomic mode: see [`super`].
pub struct AtomicIdempotency<S, DB: Backend> {
    pub(crate) inner: S,
    pub(crate) shared: Shared<DB>,
}

impl<S: Clone, DB: Backend> Clone for AtomicIdempotency<S, DB> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<S, DB, ReqBody, ResBody> Service<Request<ReqBody>> for AtomicIdempotency<S, DB>
where
    DB: Backend,
    S: Service<Request<Body>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError> + Send + 'static,
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
        let shared = self.shared.clone();
        ResponseFuture::new(async move {
            match prepare(request, &shared.config).await {
                Preparation::Rejected(rejection) => Ok(rejected(&rejection, &shared.noticed)),
                Preparation::PassThrough(request) => inner
                    .oneshot(request.map(Body::new))
                    .await
                    .map(|r| r.map(Body::new)),
                Preparation::Unrecorded(request) => unrecorded(inner, shared, request).await,
                Preparation::Ready(prepared) => Ok(recorded(inner, shared, *prepared).await),
            }
        })
    }
}

fn handler<S, DB: Backend>(
    inner: S,
    prepared: Prepared,
    config: &Config,
    offer: TxOffer,
) -> (ServiceHandler<S, DB>, idemkey_core::ClaimRequest) {
    let handler = ServiceHandler {
        inner,
        offer,
        parts: prepared.parts,
        body: prepared.body,
        storage_limit: config.storage_limit,
        per_request: config.per_request_headers.clone(),
        policy: config.status_policy.clone(),
        handler_time: Duration::ZERO,
        db: PhantomData,
    };
    (handler, prepared.claim)
}

fn options(config: &Config, plan: Plan) -> AtomicOptions {
    AtomicOptions {
        // The policy is applied by the handler's output (its verdict), not by this option.
        on_expired: config.expired_lease,
        strategy: plan.strategy,
        lookup: plan.lookup,
        ..AtomicOptions::default()
    }
}

/// Claims, runs and commits in a task of its own, so that a client going away or a timeout
/// never abandons the transaction half-way: it commits or rolls back all the same.
async fn recorded<S, DB, ResBody>(
    inner: S,
    shared: Shared<DB>,
    prepared: Prepared,
) -> Response<Body>
where
    DB: Backend,
    S: Service<Request<Body>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError> + Send,
    ResBody: HttpBody<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    let span = tracing::info_span!("idempotency", mode = "atomic", operation = %prepared.claim.operation,
        key = %prepared.claim.scope.key.short_hash(), outcome = field::Empty);
    let plan = match answered_by_lookup(&shared, &prepared, &span).await {
        Ok(response) => return response,
        Err(plan) => plan,
    };
    let offer = shared.offer();
    let Shared {
        store,
        config,
        executions,
        ..
    } = shared;
    let task = executions.spawn(
        async move {
            // Only what a replay negotiates with: the rest of the head goes to the handler.
            let accepts: http::HeaderMap = prepared
                .parts
                .headers
                .get_all(http::header::ACCEPT_ENCODING)
                .iter()
                .map(|value| (http::header::ACCEPT_ENCODING, value.clone()))
                .collect();
            let (mut handler, claim) = handler(inner, prepared, &config, offer);
            let started = Instant::now();
            let result = store
                .execute(&claim, &options(&config, plan), &mut handler)
                .await;
            store_latency(
                "atomic",
                started.elapsed().saturating_sub(handler.handler_time),
            );
            answer_outcome(result, &config, &accepts)
        }
        .instrument(span),
    );
    task.await.unwrap_or_else(|join| {
        // The handler panicked: its transaction was dropped with it, so rolled back.
        tracing::error!(error = %join, "atomic handler panicked; rolled back");
        outcome("handler_panicked");
        problem_response(&handler_failed())
    })
}

/// Answers from the lookup alone what it decides (a retry of a completed request, a mismatch, a
/// request in flight), without the task that would hold a transaction; otherwise the plan the
/// execution follows. Only where the execution can then skip its own lookup (commit-time;
/// claim-first always looks) and claims on a connection of its own (not PostgreSQL's, which
/// claims on the lookup's).
async fn answered_by_lookup<DB: Backend>(
    shared: &Shared<DB>,
    prepared: &Prepared,
    span: &tracing::Span,
) -> Result<Response<Body>, Plan> {
    let (store, config, mut plan) = (&shared.store, &shared.config, shared.plan);
    if !plan.lookup || plan.strategy != Strategy::CommitTime || DB::CLAIM_ON_LOOKUP_CONNECTION {
        return Err(plan);
    }
    let started = Instant::now();
    let looked = store
        .lookup_atomic(&prepared.claim, config.expired_lease)
        .instrument(span.clone())
        .await;
    match looked {
        Ok(AtomicLookup::Answer(decided)) => {
            store_latency("atomic", started.elapsed());
            let _entered = span.enter();
            Ok(answer_outcome::<HttpOutput, HandlerError>(
                Ok(decided.into()),
                config,
                &prepared.parts.headers,
            ))
        }
        // Looked up already: the execution need not look again.
        Ok(AtomicLookup::Absent) => {
            plan.lookup = false;
            Err(plan)
        }
        // The execution looks again and decides, or reports the failure as it would have.
        Ok(_) | Err(_) => Err(plan),
    }
}

/// A request without a key on a route where keys are optional: the same transaction and
/// the same commit rule, without a record.
///
/// The handler's answer (or its error) is the client's, as it would be without the layer;
/// only the store's own failures become problems: before the handler, `store-unavailable`
/// (nothing ran); a commit whose reply was lost, `outcome-unknown` (a retry without a key
/// could create a second resource, so it must not be told "not executed").
async fn unrecorded<S, DB, ReqBody, ResBody>(
    inner: S,
    shared: Shared<DB>,
    request: Request<ReqBody>,
) -> Result<Response<Body>, S::Error>
where
    DB: Backend,
    S: Service<Request<Body>, Response = Response<ResBody>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError> + Send,
    ReqBody: HttpBody<Data = Bytes> + Send + 'static,
    ReqBody::Error: Into<BoxError>,
    ResBody: HttpBody<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    let tx = match shared.store.begin_write().await {
        Ok(tx) => tx,
        Err(error) => return Ok(store_error(&error)),
    };
    let (config, offer) = (shared.config.clone(), shared.offer());
    let task = shared.executions.spawn(async move {
        let slot = TxSlot::new(tx);
        let mut request = request.map(Body::new);
        slot.offer_in(request.extensions_mut(), offer);
        let result = inner.oneshot(request).await;
        // The handler has answered (or failed), so its Tx is back in the slot, if it took one.
        let tx = slot.take();
        let response = match result {
            Ok(response) => response,
            Err(error) => {
                end(tx, false).await?;
                return Ok(Err(error));
            }
        };
        let (verdict, response) = judge(config.status_policy.as_ref(), response);
        end(tx, verdict == Verdict::Store).await?;
        Ok::<_, idemkey_core::Error>(Ok(response.map(Body::new)))
    });
    match task.await {
        Ok(Ok(answer)) => answer,
        Ok(Err(error)) => Ok(store_error(&error)),
        Err(_) => Ok(problem_response(&handler_failed())),
    }
}
