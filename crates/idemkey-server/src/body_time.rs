//! How long a request body may take: a silence timeout (no byte for `body_timeout`) and a
//! deadline on the whole body (`body_deadline`, counted from the request's head), so that a
//! client trickling one byte just inside the silence timeout cannot hold its connection, and
//! one of the capped slots, for as long as it likes.
//!
//! The deadline counts from the head, not from the first body byte: the header timeout
//! bounds the head, so a request holds a connection at most `header_read_timeout` +
//! `body_deadline`, whatever it does; from the first byte, a client could add a silence
//! timeout's wait before it. A total deadline rather than a minimum rate: a rate needs a
//! window and a grace period, and a client just above it still holds the connection for
//! the body's size divided by the rate; the deadline is one number that bounds the hold.
//!
//! A body cut off by either bound fails its reader (the layer's body read before any claim,
//! the proxy's forward), and the answer is 408 `body-unreadable`: nothing ran, and the
//! connection closes, since the rest of the body was never read.

use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::BoxError;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::header::CONNECTION;
use http::{HeaderValue, StatusCode, Version};
use hyper::body::{Frame, SizeHint};
use idemkey_core::{Problem, ProblemKind};
use tokio::time::{Instant, Sleep};

/// The two bounds on a request body's time.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BodyTime {
    /// The longest the body may send nothing while it is read.
    pub(crate) silence: Duration,
    /// The longest the whole body may take, from the request's head.
    pub(crate) deadline: Duration,
}

/// Why a body was cut off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cut {
    Silence(Duration),
    Deadline(Duration),
}

impl fmt::Display for Cut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Silence(after) => write!(f, "the request body sent nothing for {after:?}"),
            Self::Deadline(after) => write!(
                f,
                "the request body was not complete {after:?} after the request's head"
            ),
        }
    }
}

impl std::error::Error for Cut {}

/// The middleware: the request's body within `time`, and a request whose body was cut off
/// answered 408, whatever its handler made of the failed read.
pub(crate) async fn bound(State(time): State<BodyTime>, request: Request, next: Next) -> Response {
    if request.body().is_end_stream() {
        return next.run(request).await;
    }
    let version = request.version();
    let cut = Arc::new(OnceLock::new());
    let request = request.map(|body| Body::new(Bounded::new(body, time, cut.clone())));
    let response = next.run(request).await;
    match cut.get() {
        // A success the handler gave despite the body is its own: it is never hidden.
        Some(&cut) if response.status().as_u16() >= 400 => timed_out(cut, version),
        _ => response,
    }
}

/// 408 `body-unreadable`: the body did not arrive in time, and nothing ran.
fn timed_out(cut: Cut, version: Version) -> Response {
    tracing::debug!(%cut, "request body cut off");
    let problem = Problem::new(ProblemKind::BodyUnreadable)
        .status(StatusCode::REQUEST_TIMEOUT.as_u16())
        .detail(cut.to_string());
    let mut response = (StatusCode::REQUEST_TIMEOUT, problem.to_json()).into_response();
    let headers = response.headers_mut();
    for (name, value) in problem.headers() {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(name, value);
        }
    }
    // The rest of the body is unread, so the connection cannot carry another request; an
    // HTTP/2 stream is reset instead, and there `Connection` is not allowed.
    if version <= Version::HTTP_11 {
        headers.insert(CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// A request body within its [`BodyTime`]; once cut off, it fails, then ends.
struct Bounded {
    inner: Body,
    silence_for: Duration,
    /// Started when a read finds nothing, dropped when a frame comes.
    silence: Option<Pin<Box<Sleep>>>,
    deadline_for: Duration,
    deadline: Pin<Box<Sleep>>,
    /// Set once, when the body is cut off: the middleware reads it after the handler.
    cut: Arc<OnceLock<Cut>>,
}

impl Bounded {
    fn new(inner: Body, time: BodyTime, cut: Arc<OnceLock<Cut>>) -> Self {
        Self {
            inner,
            silence_for: time.silence,
            silence: None,
            deadline_for: time.deadline,
            deadline: Box::pin(tokio::time::sleep_until(Instant::now() + time.deadline)),
            cut,
        }
    }

    /// Which bound, if any, has passed; registers the waker with both otherwise.
    fn passed(&mut self, cx: &mut Context<'_>) -> Option<Cut> {
        if self.deadline.as_mut().poll(cx).is_ready() {
            return Some(Cut::Deadline(self.deadline_for));
        }
        let silence_for = self.silence_for;
        let silence = self
            .silence
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(silence_for)));
        silence
            .as_mut()
            .poll(cx)
            .is_ready()
            .then_some(Cut::Silence(silence_for))
    }
}

impl HttpBody for Bounded {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if this.cut.get().is_some() {
            return Poll::Ready(None);
        }
        // What has arrived is read first: a body is never cut for the reader's slowness.
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            this.silence = None;
            return Poll::Ready(frame.map(|frame| frame.map_err(Into::into)));
        }
        let Some(cut) = this.passed(cx) else {
            return Poll::Pending;
        };
        let _ = this.cut.set(cut);
        Poll::Ready(Some(Err(Box::new(cut))))
    }

    fn is_end_stream(&self) -> bool {
        self.cut.get().is_some() || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use axum::Router;
    use axum::routing::post;
    use tokio::sync::mpsc;
    use tower::ServiceExt;

    use super::*;

    const TIME: BodyTime = BodyTime {
        silence: Duration::from_secs(1),
        deadline: Duration::from_secs(3),
    };

    /// A body fed from a channel, one chunk at a time; it ends when the sender is dropped.
    struct Channel(mpsc::Receiver<Bytes>);

    impl HttpBody for Channel {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            self.0
                .poll_recv(cx)
                .map(|chunk| chunk.map(|chunk| Ok(Frame::data(chunk))))
        }
    }

    fn channel() -> (mpsc::Sender<Bytes>, Body) {
        let (tx, rx) = mpsc::channel(1);
        (tx, Body::new(Channel(rx)))
    }

    /// A handler that reads the whole body: 200 with its length, or 400 if the read fails.
    fn app(time: BodyTime) -> Router {
        Router::new()
            .route(
                "/",
                post(|body: Body| async move {
                    match axum::body::to_bytes(body, usize::MAX).await {
                        Ok(body) => (StatusCode::OK, body.len().to_string()),
                        Err(_) => (StatusCode::BAD_REQUEST, "unreadable".to_owned()),
                    }
                }),
            )
            .layer(axum::middleware::from_fn_with_state(time, bound))
    }

    async fn send(time: BodyTime, body: Body) -> (StatusCode, String) {
        let request = http::Request::post("/").body(body).unwrap();
        let response = app(time).oneshot(request).await.unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, String::from_utf8_lossy(&bytes).into_owned())
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_trickled_inside_the_silence_timeout_is_cut_at_the_deadline() {
        let (tx, body) = channel();
        tokio::spawn(async move {
            // One byte every half second: never silent for the 1 s timeout.
            while tx.send(Bytes::from_static(b"x")).await.is_ok() {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
        let (status, answer) = send(TIME, body).await;
        assert_eq!(status, StatusCode::REQUEST_TIMEOUT, "{answer}");
        assert!(answer.contains("body-unreadable"), "{answer}");
        assert!(answer.contains("3s after the request's head"), "{answer}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_body_is_cut_at_the_silence_timeout() {
        let (tx, body) = channel();
        tx.send(Bytes::from_static(b"x")).await.unwrap();
        let (status, answer) = send(TIME, body).await;
        assert_eq!(status, StatusCode::REQUEST_TIMEOUT, "{answer}");
        assert!(answer.contains("sent nothing for 1s"), "{answer}");
        drop(tx);
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_complete_within_both_bounds_is_read_whole() {
        let (tx, body) = channel();
        tokio::spawn(async move {
            for _ in 0..5 {
                tx.send(Bytes::from_static(b"x")).await.unwrap();
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
        assert_eq!(send(TIME, body).await, (StatusCode::OK, "5".to_owned()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_already_arrived_is_read_past_the_deadline() {
        // The handler reads late; what came in time is not cut for that.
        let late = Router::new()
            .route(
                "/",
                post(|body: Body| async move {
                    tokio::time::sleep(Duration::from_secs(10)).await;
                    axum::body::to_bytes(body, usize::MAX)
                        .await
                        .map(|body| body.len().to_string())
                        .map_err(|_| StatusCode::BAD_REQUEST)
                }),
            )
            .layer(axum::middleware::from_fn_with_state(TIME, bound));
        let request = http::Request::post("/").body(Body::from("hello")).unwrap();
        let response = late.oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }

    #[test]
    fn the_answer_closes_an_http1_connection_only() {
        let cut = Cut::Deadline(Duration::from_secs(2));
        let http1 = timed_out(cut, Version::HTTP_11);
        assert_eq!(http1.headers()[CONNECTION], "close");
        assert_eq!(
            http1.headers()[http::header::CONTENT_TYPE],
            "application/problem+json"
        );
        assert!(
            timed_out(cut, Version::HTTP_2)
                .headers()
                .get(CONNECTION)
                .is_none()
        );
    }
}
