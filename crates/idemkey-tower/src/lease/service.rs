//! [`Idempotency`]: the lease-mode middleware service.

use std::mem;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use bytes::Bytes;
use http::{Request, Response};
use http_body::Body as HttpBody;
use idemkey_core::{BoxError, Problem, Store, Verdict};
use tower::Service;
use tracing::{Instrument, Span, field};

use super::ResponseFuture;
use super::flow;
use super::look::look_first;
use super::running::Running;
use super::transactions::MaybeTransactions;
use crate::answer::store_error;
use crate::observe::outcome;
use crate::policy::judge;
use crate::{Config, Executions, Preparation, prepare, problem_response};

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
    store: St,
    config: Arc<Config>,
    executions: Executions,
    running: Arc<Running>,
    transactions: MaybeTransactions,
}

impl<S, St> Idempotency<S, St> {
    /// Wraps `inner`, keeping records in `store`.
    pub fn new(inner: S, store: St, config: Config) -> Self {
        let tasks = (Executions::new(), Arc::default());
        Self::from_shared(inner, store, Arc::new(config), tasks)
    }

    /// A service of a layer, sharing the layer's executions and what they are running.
    pub(crate) fn from_shared(
        inner: S,
        store: St,
        config: Arc<Config>,
        (executions, running): (Executions, Arc<Running>),
    ) -> Self {
        Self {
            inner,
            store,
            config,
            executions,
            running,
            transactions: MaybeTransactions::default(),
        }
    }

    /// The same service, offering its handlers `transactions`.
    pub(crate) fn with_transactions(mut self, transactions: MaybeTransactions) -> Self {
        self.transactions = transactions;
        self
    }

    /// The store its records are kept in.
    #[cfg(feature = "sqlx")]
    pub(crate) fn store(&self) -> &St {
        &self.store
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
        let keyed = request.headers().contains_key(&self.config.key_header);
        let span = if keyed && self.config.honours(request.method()) {
            tracing::info_span!(
                "idempotency",
                operation = field::Empty,
                key = field::Empty,
                outcome = field::Empty,
            )
        } else {
            Span::none()
        };
        let shared = Shared {
            store: self.store.clone(),
            config: self.config.clone(),
            executions: self.executions.clone(),
            running: self.running.clone(),
            transactions: self.transactions.clone(),
        };
        let handled = handle(inner, shared, request);
        ResponseFuture::new(handled.instrument(span))
    }
}

/// What a request's handling takes from the service.
struct Shared<St> {
    store: St,
    config: Arc<Config>,
    executions: Executions,
    running: Arc<Running>,
    transactions: MaybeTransactions,
}

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
    let Shared {
        store,
        config,
        executions,
        running,
        transactions,
    } = shared;
    let prepared = match prepare(request, &config).await {
        Preparation::Ready(prepared) => *prepared,
        Preparation::Unrecorded(request) if transactions.0.is_some() => {
            let unrecorded = unrecorded(inner, request.map(Body::new), transactions, config);
            return joined(executions.spawn(unrecorded.in_current_span()).await);
        }
        Preparation::PassThrough(request) | Preparation::Unrecorded(request) => {
            let response = inner.call(request.map(Body::new)).await?;
            return Ok(response.map(Body::new));
        }
        Preparation::Rejected(rejection) => {
            outcome(rejection.outcome);
            return Ok(problem_response(&rejection.problem));
        }
    };
    let span = Span::current();
    span.record("operation", field::display(&prepared.claim.operation));
    span.record("key", prepared.claim.scope.key.short_hash());
    let start = match look_first(&store, &running, &prepared, &config).await {
        Ok(looked) => match looked.start() {
            ControlFlow::Continue(start) => start,
            ControlFlow::Break(answer) => return Ok(answer),
        },
        Err(err) => return Ok(store_error(&err)),
    };
    // From the claim on, the work belongs to a task of its own: a dropped response future
    // (client gone, timeout layer) must not abandon a claim or a handler half-way (§6).
    let prepared = (prepared, start);
    let flow = flow::run(inner, prepared, (store, running, transactions), config);
    joined(executions.spawn(flow.in_current_span()).await)
}

/// The answer of a task of its own: a panic is `handler-failed`.
fn joined<E>(
    task: Result<Result<Response<Body>, E>, tokio::task::JoinError>,
) -> Result<Response<Body>, E> {
    task.unwrap_or_else(|err| {
        tracing::error!(error = %err, "the idempotency task failed");
        let problem = Problem::custom("handler-failed", "The request handler failed", 500);
        Ok(problem_response(&problem))
    })
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
