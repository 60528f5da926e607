//! Each way between actix-web's HTTP types (the `http` 0.2 crate's) and the layer's (`http`
//! 1): the request head, the bodies, the responses and the extensions the layer exchanges
//! with the application.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use actix_web::body::{BodyStream, BoxBody, MessageBody};
use actix_web::dev::Payload;
use actix_web::error::PayloadError;
use actix_web::http::header::{HeaderName as ActixName, HeaderValue as ActixValue};
use actix_web::http::{StatusCode as ActixStatus, Version as ActixVersion};
use actix_web::{HttpMessage, HttpRequest, HttpResponse};
use bytes::Bytes;
use futures_util::{Stream, StreamExt, TryStreamExt};
use http_body::{Body as _, Frame, SizeHint};
use http_body_util::{BodyExt, Full};
use idemkey_core::BoxError;
use idemkey_tower::{Actor, Body, NotExecuted, RouteTemplate};
use tokio::sync::mpsc;

/// The layer's request for `head` over `body`, with the [`Actor`] that authentication put in
/// actix's extensions and the route template actix matched (the operation's name). `None` if a part does not convert, which actix's own parser makes
/// unreachable in practice.
pub(crate) fn tower_request<B>(head: &HttpRequest, body: B) -> Option<http::Request<B>> {
    let mut request = http::Request::new(body);
    *request.method_mut() = http::Method::from_bytes(head.method().as_str().as_bytes()).ok()?;
    *request.uri_mut() = http::Uri::try_from(head.uri().to_string()).ok()?;
    *request.version_mut() = version(head.version());
    let headers = request.headers_mut();
    headers.reserve(head.headers().len());
    for (name, value) in head.headers() {
        headers.append(
            http::HeaderName::from_bytes(name.as_str().as_bytes()).ok()?,
            http::HeaderValue::from_bytes(value.as_bytes()).ok()?,
        );
    }
    if let Some(actor) = head.extensions().get::<Actor>() {
        request.extensions_mut().insert(actor.clone());
    }
    if let Some(template) = head.match_pattern() {
        request.extensions_mut().insert(RouteTemplate(template));
    }
    Some(request)
}

fn version(version: ActixVersion) -> http::Version {
    match version {
        ActixVersion::HTTP_09 => http::Version::HTTP_09,
        ActixVersion::HTTP_10 => http::Version::HTTP_10,
        ActixVersion::HTTP_2 => http::Version::HTTP_2,
        ActixVersion::HTTP_3 => http::Version::HTTP_3,
        _ => http::Version::HTTP_11,
    }
}

/// The request body the layer reads: the client's payload, read by a task on the worker
/// (actix's payload stays on its thread) and handed over chunk by chunk, so that the
/// layer's own bounds on bodies (size, stalls, deadline) apply as they do under axum.
#[derive(Debug)]
pub struct RequestBody {
    chunks: mpsc::Receiver<io::Result<Bytes>>,
    /// The bytes still to come, when `Content-Length` said how many.
    remaining: Option<u64>,
}

impl RequestBody {
    /// Starts reading `payload`, whose length `Content-Length` gives, if it does.
    pub(crate) fn read(mut payload: Payload, length: Option<u64>) -> Self {
        // One chunk in flight: the reader waits for the layer, as hyper's body would.
        let (sender, chunks) = mpsc::channel(1);
        if length != Some(0) {
            actix_web::rt::spawn(async move {
                while let Some(chunk) = payload.next().await {
                    let failed = chunk.is_err();
                    let chunk = chunk.map_err(|error| io::Error::other(error.to_string()));
                    // The layer stopped reading (it answered already): so do we.
                    if sender.send(chunk).await.is_err() || failed {
                        break;
                    }
                }
            });
        }
        Self {
            chunks,
            remaining: length,
        }
    }
}

impl http_body::Body for RequestBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        if self.remaining == Some(0) {
            return Poll::Ready(None);
        }
        let chunk = std::task::ready!(self.chunks.poll_recv(cx));
        if let (Some(Ok(bytes)), Some(remaining)) = (&chunk, &mut self.remaining) {
            *remaining = remaining.saturating_sub(bytes.len() as u64);
        }
        Poll::Ready(chunk.map(|chunk| chunk.map(Frame::data)))
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == Some(0)
    }

    fn size_hint(&self) -> SizeHint {
        self.remaining.map(SizeHint::with_exact).unwrap_or_default()
    }
}

/// The layer's request body as actix's payload, for the handler the layer calls.
pub(crate) fn payload(body: Body) -> Payload {
    let stream = TryStreamExt::map_err(body.into_data_stream(), |error| {
        PayloadError::Io(io::Error::other(error))
    });
    let stream: Pin<Box<dyn Stream<Item = Result<Bytes, PayloadError>>>> = Box::pin(stream);
    Payload::from(stream)
}

/// A handler's actix response as the layer reads it: its body collected (the layer stores
/// it), and the markers the layer acts on moved across: [`NotExecuted`] and, with the
/// `sqlx` feature, `DbError`. An error reading the body is the handler's failure.
pub(crate) async fn tower_response<B>(
    mut response: HttpResponse<B>,
) -> Result<http::Response<Full<Bytes>>, BoxError>
where
    B: MessageBody,
{
    let mut converted = http::Response::new(Full::default());
    move_markers(&mut response, converted.extensions_mut());
    *converted.status_mut() = http::StatusCode::from_u16(response.status().as_u16())?;
    let headers = converted.headers_mut();
    headers.reserve(response.headers().len());
    for (name, value) in response.headers() {
        headers.append(
            http::HeaderName::from_bytes(name.as_str().as_bytes())?,
            http::HeaderValue::from_bytes(value.as_bytes())?,
        );
    }
    let body = actix_web::body::to_bytes(response.into_body())
        .await
        .map_err(|error| format!("reading the handler's response body: {}", error.into()))?;
    *converted.body_mut() = Full::new(body);
    Ok(converted)
}

fn move_markers<B>(response: &mut HttpResponse<B>, to: &mut http::Extensions) {
    let mut from = response.extensions_mut();
    if let Some(marker) = from.remove::<NotExecuted>() {
        to.insert(marker);
    }
    #[cfg(feature = "sqlx")]
    if let Some(error) = from.remove::<idemkey_tower::atomic::DbError>() {
        to.insert(error);
    }
}

/// The layer's answer as an actix response. A body whose length is known (every stored or
/// replayed answer, every problem) is handed over whole; another is streamed.
pub(crate) async fn actix_response(response: http::Response<Body>) -> HttpResponse {
    let (parts, body) = response.into_parts();
    let status =
        ActixStatus::from_u16(parts.status.as_u16()).unwrap_or(ActixStatus::INTERNAL_SERVER_ERROR);
    let body = if body.size_hint().exact().is_some() {
        match body.collect().await {
            Ok(collected) => BoxBody::new(collected.to_bytes()),
            Err(error) => {
                tracing::error!(%error, "the layer's answer could not be read");
                return HttpResponse::InternalServerError().finish();
            }
        }
    } else {
        BoxBody::new(BodyStream::new(body.into_data_stream()))
    };
    let mut response = HttpResponse::with_body(status, body);
    let headers = response.headers_mut();
    for (name, value) in &parts.headers {
        // actix frames the body itself: a length or a coding copied over would be sent twice.
        if is_framing(name) {
            continue;
        }
        if let (Ok(name), Ok(value)) = (
            ActixName::from_bytes(name.as_str().as_bytes()),
            ActixValue::from_bytes(value.as_bytes()),
        ) {
            headers.append(name, value);
        }
    }
    response
}

fn is_framing(name: &http::HeaderName) -> bool {
    name == http::header::CONTENT_LENGTH
        || name == http::header::TRANSFER_ENCODING
        || name == http::header::CONNECTION
}
