//! [`ResponseFuture`]: the future of both modes' services.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::Body;
use http::Response;

type BoxFuture<E> = Pin<Box<dyn Future<Output = Result<Response<Body>, E>> + Send + 'static>>;

/// Response future for [`Idempotency`](crate::Idempotency) and, in atomic mode (feature `sqlx`
/// of idemkey-tower; `sqlite` or `postgres` of the `idemkey` facade),
/// [`AtomicIdempotency`](crate::atomic::AtomicIdempotency).
pub struct ResponseFuture<E> {
    inner: BoxFuture<E>,
}

impl<E> ResponseFuture<E> {
    pub(crate) fn new(
        future: impl Future<Output = Result<Response<Body>, E>> + Send + 'static,
    ) -> Self {
        Self {
            inner: Box::pin(future),
        }
    }
}

impl<E> Future for ResponseFuture<E> {
    type Output = Result<Response<Body>, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}

impl<E> fmt::Debug for ResponseFuture<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}
