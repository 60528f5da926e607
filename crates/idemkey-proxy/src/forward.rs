//! Forwarding a request to the upstream over a pooled keep-alive client, and what the
//! outcome of that call means for the record (behaviour [§14](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#14-the-proxy)): an answer is the upstream's to
//! store or release; a refused connection means nothing was sent; a failure after sending
//! leaves the outcome unknown; a client's body that cannot be read is the client's fault.
//! The client's connection is framed by the proxy, never by the upstream's headers, and no
//! part of an answer's body takes longer than the upstream timeout.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::ConnectInfo;
use bytes::BytesMut;
use futures_util::StreamExt;
use http::header::CONTENT_LENGTH;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response};
use http_body_util::{BodyExt, BodyStream, StreamBody};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use idemkey_core::{DerivedKeys, Problem, ProblemKind, Verdict};
use idemkey_tower::{Keys, NotExecuted, problem_response};

use crate::headers::{framed_twice, set_forwarded, strip_hop_by_hop, strip_length};
use crate::upstream::Upstream;

/// The slugs of the problems the proxy answers itself, beside the layer's
/// ([`ProblemKind`](idemkey_core::ProblemKind)). Each has a section of
/// [`idemkey::problems`](https://docs.rs/idemkey/latest/idemkey/problems/index.html).
pub const PROBLEM_SLUGS: [&str; 3] = [UPSTREAM_UNREACHABLE, UPSTREAM_OUTCOME_UNKNOWN, BAD_TARGET];

const UPSTREAM_UNREACHABLE: &str = "upstream-unreachable";
const UPSTREAM_OUTCOME_UNKNOWN: &str = "upstream-outcome-unknown";
const BAD_TARGET: &str = "bad-target";

/// The service at the bottom of the proxy: sends the request upstream.
#[derive(Clone)]
pub(crate) struct Forward {
    client: Client<HttpConnector, Body>,
    upstream: Upstream,
    timeout: Duration,
    derived_key_header: HeaderName,
    release_unknown: bool,
}

impl Forward {
    pub(crate) fn new(
        upstream: Upstream,
        timeout: Duration,
        derived_key_header: HeaderName,
        release_unknown: bool,
    ) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(timeout));
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(60))
            .build(connector);
        Self {
            client,
            upstream,
            timeout,
            derived_key_header,
            release_unknown,
        }
    }

    async fn forward(self, request: Request<Body>) -> Response<Body> {
        let (mut parts, body) = request.into_parts();
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|info| info.0);
        parts.uri = match self.upstream.uri(&parts.uri) {
            Ok(uri) => uri,
            Err(error) => {
                tracing::debug!(%error, "request target not forwardable");
                return bad_target("the path and query cannot be joined to the upstream's URL");
            }
        };
        strip_hop_by_hop(&mut parts.headers);
        set_forwarded(&mut parts.headers, peer);
        // Only the proxy names a record to the upstream: a client's own would pass for one.
        parts.headers.remove(&self.derived_key_header);
        // The same for every execution of one record: an upstream that deduplicates on it
        // turns a re-execution after a crash or a lost reply into a no-op.
        // A recorded request's claim is on disk before anything leaves: a claim lost in a
        // power cut after the forward would be claimed afresh, and forwarded again.
        let keys = match recorded_keys(&parts.extensions).await {
            Ok(keys) => keys,
            Err(response) => return response,
        };
        if let Some(keys) = &keys
            && let Ok(value) = HeaderValue::from_str(&keys.key("upstream"))
        {
            parts.headers.insert(self.derived_key_header.clone(), value);
        }
        let recorded = keys.is_some();
        let method = parts.method.clone();
        parts.version = http::Version::HTTP_11;
        let body_failed = Arc::new(AtomicBool::new(false));
        let body = watched(body, body_failed.clone());
        let sent = self.client.request(Request::from_parts(parts, body));
        match tokio::time::timeout(self.timeout, sent).await {
            Ok(Ok(response)) => self.answer(response, &method, recorded).await,
            // Checked first: an unreadable body aborts the call, and it is the client's fault.
            Ok(Err(_)) if body_failed.load(Ordering::Acquire) => body_unreadable(),
            Ok(Err(error)) if error.is_connect() => unreachable(&error),
            Ok(Err(error)) => self.unknown(&error.to_string()),
            Err(_elapsed) => self.unknown("no answer within the upstream timeout"),
        }
    }

    /// The upstream's answer as the client gets it, its framing the proxy's own: a recorded
    /// answer's body read ahead within the timeout, an unrecorded one streamed, each part
    /// within the timeout.
    async fn answer<B>(
        &self,
        response: Response<B>,
        method: &Method,
        recorded: bool,
    ) -> Response<Body>
    where
        B: HttpBody<Data = Bytes> + Send + 'static,
        B::Error: Into<axum::BoxError>,
    {
        let (mut parts, body) = response.into_parts();
        if framed_twice(&parts.headers) {
            // Dropped unread, the body takes the upstream's connection with it.
            return self
                .unknown("the answer was framed by both Transfer-Encoding and Content-Length");
        }
        strip_hop_by_hop(&mut parts.headers);
        strip_length(&mut parts.headers, method);
        let body = Body::new(body);
        if !recorded {
            let body = streamed(body, &mut parts.headers, self.timeout);
            return Response::from_parts(parts, body);
        }
        match tokio::time::timeout(self.timeout, read_head(body, self.timeout)).await {
            Ok(Ok(body)) => Response::from_parts(parts, body),
            Ok(Err(error)) => self.unknown(&error.to_string()),
            Err(_elapsed) => self.unknown("the body did not arrive within the timeout"),
        }
    }

    /// Sent, then no answer: the upstream may or may not have acted. Stored by default, so a
    /// retry is told the same and never executes twice silently.
    fn unknown(&self, cause: &str) -> Response<Body> {
        tracing::warn!(cause, "upstream outcome unknown");
        let problem = Problem::custom(
            UPSTREAM_OUTCOME_UNKNOWN,
            "The upstream's outcome is unknown",
            502,
        )
        .detail("the request was sent upstream, which did not answer: it may or may not have taken effect");
        let mut response = problem_response(&problem);
        let verdict = if self.release_unknown {
            Verdict::Release
        } else {
            Verdict::Store
        };
        response.extensions_mut().insert(verdict);
        response
    }
}

/// The most of a recorded answer's body read before it is handed on: the layer's storage
/// limit (`Config::storage_limit`). A longer body is streamed, and stored without its body.
const READ_AHEAD: usize = 1024 * 1024;

/// Reads a recorded answer's body up to [`READ_AHEAD`], so that a connection lost
/// mid-body is an unknown outcome (the upstream acted, the answer is lost), never a half
/// body stored or a claim released for a retry to execute again. The rest of a longer body
/// follows as a stream, each part within `idle`.
async fn read_head(mut body: Body, idle: Duration) -> Result<Body, axum::Error> {
    let mut head = BytesMut::new();
    while let Some(frame) = body.frame().await {
        // Trailers are not forwarded: HTTP/1.1 clients rarely ask for them.
        if let Ok(data) = frame?.into_data() {
            head.extend_from_slice(&data);
        }
        if head.len() > READ_AHEAD {
            let head = futures_util::stream::once(async move { Ok(head.freeze()) });
            let tail = within(body, idle).into_data_stream();
            return Ok(Body::from_stream(head.chain(tail)));
        }
    }
    Ok(Body::from(head.freeze()))
}

/// The client's body, noting in `failed` whether reading it failed (a malformed chunk, a
/// client too slow), so that the call's failure is not taken for the upstream's.
fn watched(body: Body, failed: Arc<AtomicBool>) -> Body {
    Body::new(body.map_err(move |error| {
        failed.store(true, Ordering::Release);
        error
    }))
}

/// An unrecorded answer's body, streamed as it arrives, each part within `idle`. A body
/// hyper knows the length of keeps it as the proxy's `Content-Length`.
fn streamed(body: Body, headers: &mut HeaderMap, idle: Duration) -> Body {
    match body.size_hint().exact() {
        Some(0) => return body,
        Some(length) => {
            headers.insert(CONTENT_LENGTH, HeaderValue::from(length));
        }
        None => {}
    }
    within(body, idle)
}

/// `body`, each part of it within `idle`: a stalled upstream ends the answer (and the
/// client's connection) rather than holding the client.
fn within(body: Body, idle: Duration) -> Body {
    let frames =
        futures_util::stream::unfold(Some(BodyStream::new(body)), move |frames| async move {
            let mut frames = frames?;
            match tokio::time::timeout(idle, frames.next()).await {
                Ok(Some(frame)) => Some((frame, Some(frames))),
                Ok(None) => None,
                Err(_elapsed) => {
                    tracing::warn!("an answer's body stalled past the upstream timeout");
                    Some((Err(axum::Error::new("the answer's body stalled")), None))
                }
            }
        });
    Body::new(StreamBody::new(frames))
}

/// The derived keys of a request the layer recorded, once its claim is on disk; `None` for
/// one it did not record. A flush that failed answers 503 `store-unavailable`: nothing was
/// forwarded.
async fn recorded_keys(
    extensions: &http::Extensions,
) -> Result<Option<DerivedKeys>, Response<Body>> {
    let Some(keys) = Keys::from_extensions(extensions) else {
        return Ok(None);
    };
    match keys.get().await {
        Ok(keys) => Ok(Some(keys)),
        Err(error) => {
            tracing::warn!(%error, "the claim could not be made durable; not forwarded");
            let mut response = idemkey_tower::store_unavailable();
            response.extensions_mut().insert(NotExecuted);
            Err(response)
        }
    }
}

/// The client's body could not be read: the upstream got no whole request.
fn body_unreadable() -> Response<Body> {
    let mut response = problem_response(&Problem::new(ProblemKind::BodyUnreadable));
    response.extensions_mut().insert(NotExecuted);
    response
}

/// Not connected, so nothing was sent: the claim is given back.
fn unreachable(error: &hyper_util::client::legacy::Error) -> Response<Body> {
    tracing::warn!(%error, "upstream unreachable");
    let problem = Problem::custom(
        UPSTREAM_UNREACHABLE,
        "The upstream could not be reached",
        502,
    )
    .detail("the request was not forwarded; retry with the same key");
    let mut response = problem_response(&problem);
    response.extensions_mut().insert(NotExecuted);
    response
}

/// The request's target (its host, path or query) cannot be forwarded: nothing was sent.
pub(crate) fn bad_target(detail: &str) -> Response<Body> {
    let problem =
        Problem::custom(BAD_TARGET, "The request target cannot be forwarded", 400).detail(detail);
    let mut response = problem_response(&problem);
    response.extensions_mut().insert(NotExecuted);
    response
}

impl tower::Service<Request<Body>> for Forward {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { Ok(this.forward(request).await) })
    }
}
