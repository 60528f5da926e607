//! [`Bridge`]: the inner service the tower layer wraps. The layer's work runs in tasks that
//! may move between threads, while actix's handlers stay on their worker's thread; the
//! bridge hands each call of the layer to a task on the worker that holds the request,
//! which runs the actix service and sends its response back.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use actix_web::body::MessageBody;
use actix_web::dev::{Service, ServiceRequest, ServiceResponse};
use actix_web::{HttpMessage, HttpRequest};
use bytes::Bytes;
use http_body_util::Full;
use idemkey_core::BoxError;
use idemkey_tower::Body;
use tokio::sync::{mpsc, oneshot};

use crate::convert;
use crate::extract::Carried;

/// The tower service the layer calls for the handler: it finds, in the request's
/// extensions, the worker task of the actix request the call belongs to.
#[derive(Clone, Copy, Debug, Default)]
pub struct Bridge;

/// Where a request's calls go: its task on the worker. In the extensions of the request the
/// layer is given, taken out before the handler sees them.
#[derive(Clone)]
pub(crate) struct Route(mpsc::UnboundedSender<Call>);

/// One call of the handler by the layer (atomic mode may call it again after a
/// serialization failure), and where its response goes.
pub(crate) struct Call {
    request: http::Request<Body>,
    reply: oneshot::Sender<Result<http::Response<Full<Bytes>>, BoxError>>,
}

/// Why the bridge could not run the handler.
#[derive(Debug)]
pub(crate) enum BridgeError {
    /// The request did not come through [`crate::Idempotency`]: the layer was used
    /// outside it.
    NoRoute,
    /// The worker's task is gone (the handler panicked, or the worker stopped).
    Gone,
}

impl std::fmt::Display for BridgeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::NoRoute => "the request did not come through idemkey_actix::Idempotency",
            Self::Gone => "the actix handler's task ended without answering",
        })
    }
}

impl std::error::Error for BridgeError {}

type CallFuture =
    Pin<Box<dyn Future<Output = Result<http::Response<Full<Bytes>>, BoxError>> + Send>>;

impl tower::Service<http::Request<Body>> for Bridge {
    type Response = http::Response<Full<Bytes>>;
    type Error = BoxError;
    type Future = CallFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: http::Request<Body>) -> CallFuture {
        let route = request.extensions_mut().remove::<Route>();
        Box::pin(async move {
            let Route(calls) = route.ok_or(BridgeError::NoRoute)?;
            let (reply, answer) = oneshot::channel();
            calls
                .send(Call { request, reply })
                .map_err(|_| BridgeError::Gone)?;
            answer.await.map_err(|_| BridgeError::Gone)?
        })
    }
}

/// The actix request between the layer's calls: in the worker's task while a call runs,
/// here otherwise. One owner at a time, because actix's routing inside the wrapped service
/// needs the only reference to it.
pub(crate) type Held = Rc<RefCell<Option<HttpRequest>>>;

/// Starts the worker task that serves `held`'s calls with `service`, and returns the route
/// the layer's calls take to it. The task ends when the layer drops its last route: it is
/// not tied to the client's connection, so a handler the layer runs is never cut short by a
/// client that leaves, as under axum.
pub(crate) fn serve<S, B>(service: Rc<S>, held: Held) -> Route
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    B: MessageBody + 'static,
{
    let (route, mut calls) = mpsc::unbounded_channel::<Call>();
    actix_web::rt::spawn(async move {
        while let Some(Call { request, reply }) = calls.recv().await {
            let answer = run(&*service, &held, request).await;
            let _ = reply.send(answer);
        }
    });
    Route(route)
}

/// One call: the actix request rebuilt around the layer's body and extensions, the service
/// run, the request taken back.
async fn run<S, B>(
    service: &S,
    held: &Held,
    request: http::Request<Body>,
) -> Result<http::Response<Full<Bytes>>, BoxError>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody + 'static,
{
    let (parts, body) = request.into_parts();
    let head = held.borrow_mut().take().ok_or(BridgeError::Gone)?;
    // Replaces what an earlier call (atomic mode's re-run) left.
    head.extensions_mut().insert(Carried(parts.extensions));
    let request = ServiceRequest::from_parts(head, convert::payload(body));
    let response = match service.call(request).await {
        Ok(response) => {
            let (head, response) = response.into_parts();
            *held.borrow_mut() = Some(head);
            response.map_into_boxed_body()
        }
        // The request is gone with the error; the middleware answers without it.
        Err(error) => error.error_response(),
    };
    convert::tower_response(response).await
}
