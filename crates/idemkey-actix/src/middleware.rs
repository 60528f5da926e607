//! [`Idempotency`]: the actix-web middleware, one of idemkey's tower layers around the actix
//! service it wraps.

use std::cell::RefCell;
use std::rc::Rc;

use actix_web::HttpResponse;
use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{Service, ServiceRequest, ServiceResponse, Transform, forward_ready};
use futures_util::future::{LocalBoxFuture, Ready, ready};
use idemkey_core::BoxError;
use idemkey_tower::Body;
use tower::{Layer, ServiceExt};

use crate::bridge::{self, Bridge, Held};
use crate::convert::{self, RequestBody};

/// The idempotency middleware for actix-web: `wrap` a resource or a scope in it.
///
/// It runs one of idemkey's tower layers, so its answers are the axum layer's, byte for
/// byte: `IdempotencyLayer` (lease mode, any store; `transactional()` offers keyed requests
/// the [`Tx`](crate::Tx) their record completes in) or, with the `sqlx` feature,
/// `AtomicIdempotencyLayer` (atomic mode: the claim, the handler's writes and the stored
/// response in one transaction, the handler taking [`Tx`](crate::Tx)).
///
/// The actor comes from the `idemkey_tower::Actor` that authentication, a middleware
/// outside this one, put in the request's extensions (or from the layer's own
/// `Config::actor`, which sees the request's head).
///
/// A handler the layer runs belongs to a task of its own on the worker, as under axum: a
/// client that leaves does not cut it short, and the layer stores or releases its record.
#[derive(Clone, Debug)]
pub struct Idempotency<L> {
    layer: L,
}

impl<L> Idempotency<L> {
    /// The middleware of `layer`, an `IdempotencyLayer` or an `AtomicIdempotencyLayer`.
    pub fn new(layer: L) -> Self {
        Self { layer }
    }
}

impl<S, B, L> Transform<S, ServiceRequest> for Idempotency<L>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    B: MessageBody + 'static,
    L: Layer<Bridge>,
    L::Service: tower::Service<http::Request<RequestBody>, Response = http::Response<Body>>
        + Clone
        + 'static,
    <L::Service as tower::Service<http::Request<RequestBody>>>::Error: Into<BoxError>,
{
    type Response = ServiceResponse<BoxBody>;
    type Error = actix_web::Error;
    type Transform = IdempotencyMiddleware<S, L::Service>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, ()>>;

    fn new_transform(&self, service: S) -> Self::Future {
        ready(Ok(IdempotencyMiddleware {
            service: Rc::new(service),
            layered: self.layer.layer(Bridge),
        }))
    }
}

/// The service [`Idempotency`] wraps around a route's.
pub struct IdempotencyMiddleware<S, T> {
    service: Rc<S>,
    /// The tower layer's service over the [`Bridge`].
    layered: T,
}

impl<S, B, T> Service<ServiceRequest> for IdempotencyMiddleware<S, T>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    B: MessageBody + 'static,
    T: tower::Service<http::Request<RequestBody>, Response = http::Response<Body>>
        + Clone
        + 'static,
    T::Error: Into<BoxError>,
{
    type Response = ServiceResponse<BoxBody>;
    type Error = actix_web::Error;
    type Future = LocalBoxFuture<'static, Result<Self::Response, Self::Error>>;

    forward_ready!(service);

    fn call(&self, request: ServiceRequest) -> Self::Future {
        Box::pin(handle(self.service.clone(), self.layered.clone(), request))
    }
}

/// One request: handed to the layer, with the route its calls of the handler take.
async fn handle<S, B, T>(
    service: Rc<S>,
    layered: T,
    request: ServiceRequest,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    B: MessageBody + 'static,
    T: tower::Service<http::Request<RequestBody>, Response = http::Response<Body>>,
    T::Error: Into<BoxError>,
{
    let (head, payload) = request.into_parts();
    let body = RequestBody::read(payload, content_length(&head));
    let Some(mut request) = convert::tower_request(&head, body) else {
        let response = HttpResponse::BadRequest().body("the request's head cannot be read");
        return Ok(ServiceResponse::new(head, response));
    };
    let held: Held = Rc::new(RefCell::new(Some(head)));
    request
        .extensions_mut()
        .insert(bridge::serve(service, held.clone()));
    let response = match layered.oneshot(request).await {
        Ok(response) => convert::actix_response(response).await,
        Err(error) => {
            let error = error.into();
            tracing::error!(%error, "the idempotency layer failed");
            return Err(actix_web::error::ErrorInternalServerError(error));
        }
    };
    let head = held.borrow_mut().take();
    match head {
        Some(head) => Ok(ServiceResponse::new(head, response)),
        // The handler's service failed and took the request with it: actix answers the
        // error's own response, which is this one.
        None => Err(actix_web::error::InternalError::from_response("idempotency", response).into()),
    }
}

/// The request body's length, when the client declared it.
fn content_length(head: &actix_web::HttpRequest) -> Option<u64> {
    let headers = head.headers();
    if headers.contains_key(actix_web::http::header::TRANSFER_ENCODING) {
        return None;
    }
    headers
        .get(actix_web::http::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}
