//! The inner service as an [`AtomicHandler`]: it runs with the transaction in its request.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::Body;
use bytes::Bytes;
use http::{HeaderName, Request, Response, request::Parts};
use http_body::Body as HttpBody;
use idemkey_core::{BoxError, StatusPolicy, StoredResponse, Verdict};
use idemkey_sqlx::{AtomicHandler, AtomicResponse, Backend, HandlerResult};
use sqlx::Transaction;
use tower::{Service, ServiceExt};

use super::DbError;
use crate::policy::judge;
use crate::tx::{TxOffer, TxSlot};
use crate::{ResponsePolicy, split_response};

/// What the handler answered: the first caller's response, what to store, and whether to.
pub(crate) struct HttpOutput {
    pub(crate) response: Response<Body>,
    stored: StoredResponse,
    verdict: Verdict,
    retryable: bool,
}

impl AtomicResponse for HttpOutput {
    fn status(&self) -> u16 {
        self.stored.status
    }

    fn to_stored(&self) -> StoredResponse {
        self.stored.clone()
    }

    fn not_executed(&self) -> bool {
        self.verdict == Verdict::Reject
    }

    fn retryable(&self) -> bool {
        self.retryable
    }

    /// The application's policy decided already, when the response was split.
    fn stored(&self, _policy: StatusPolicy) -> bool {
        self.verdict == Verdict::Store
    }
}

impl From<HttpOutput> for Response<Body> {
    fn from(output: HttpOutput) -> Self {
        output.response
    }
}

/// Why the inner service failed (it returned `Err`, or its body could not be read).
#[derive(Debug, thiserror::Error)]
#[error("handler failed: {0}")]
pub(crate) struct HandlerError(#[source] BoxError);

/// Calls the inner service with a copy of the buffered request and the transaction.
pub(crate) struct ServiceHandler<S, DB> {
    pub(crate) inner: S,
    /// What the layer offers the handler, beside the transaction.
    pub(crate) offer: TxOffer,
    pub(crate) parts: Parts,
    pub(crate) body: Bytes,
    pub(crate) storage_limit: usize,
    pub(crate) per_request: Vec<HeaderName>,
    pub(crate) policy: Arc<dyn ResponsePolicy>,
    /// Time spent in the inner service, over every attempt: the rest is the store's.
    pub(crate) handler_time: Duration,
    pub(crate) db: PhantomData<fn() -> DB>,
}

impl<S, DB, ResBody> AtomicHandler<DB> for ServiceHandler<S, DB>
where
    DB: Backend,
    S: Service<Request<Body>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError> + Send,
    ResBody: HttpBody<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = HttpOutput;
    type Error = HandlerError;

    async fn call(
        &mut self,
        tx: Transaction<'static, DB>,
    ) -> HandlerResult<DB, HttpOutput, HandlerError> {
        let slot = TxSlot::new(tx);
        let mut request = Request::from_parts(self.parts.clone(), Body::from(self.body.clone()));
        slot.offer_in(request.extensions_mut(), self.offer.clone());
        let started = Instant::now();
        let result = self.inner.clone().oneshot(request).await;
        self.handler_time += started.elapsed();
        // The handler has answered, so its Tx is dropped and back in the slot.
        let tx = slot.take();
        let response = match result {
            Ok(response) => response,
            Err(error) => return (tx, Err(HandlerError(error.into()))),
        };
        let (verdict, response) = judge(self.policy.as_ref(), response);
        let retryable = response
            .extensions()
            .get::<DbError>()
            .is_some_and(|e| DB::is_retryable(&e.0));
        if retryable {
            tracing::info!("serialization failure or deadlock: running the handler again");
        }
        match split_response(response, self.storage_limit, &self.per_request).await {
            Ok((response, stored)) => {
                let output = HttpOutput {
                    response,
                    stored,
                    verdict,
                    retryable,
                };
                (tx, Ok(output))
            }
            Err(error) => (tx, Err(HandlerError(error))),
        }
    }
}
