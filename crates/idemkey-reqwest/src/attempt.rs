//! One attempt's outcome, read for the table: the answer's body buffered (so that a cut is
//! seen here and not by the caller), its problem type, `Retry-After` and replay header.

use std::time::{Duration, SystemTime};

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use http::StatusCode;
use http_body_util::{BodyDataStream, BodyExt};
use reqwest::{Body, Response, ResponseBuilderExt, Url};

use crate::classify::{self, Answer, Failure};
use crate::retry_after::retry_after;

/// The answer header that marks a replay.
const REPLAYED: &str = "idempotent-replayed";
/// The answer header by which Stripe's API says whether a retry can help.
const SHOULD_RETRY: &str = "stripe-should-retry";

/// An answer, its body read up to the buffer limit.
pub(crate) struct Received {
    pub(crate) response: Response,
    /// The problem slug of a 409 or 5xx problem body.
    problem: Option<String>,
}

impl Received {
    /// An answer handed on as it is, its body unread.
    pub(crate) fn unread(response: Response) -> Self {
        Self {
            response,
            problem: None,
        }
    }

    /// The answer as the table reads it, for a request that carried a key or not.
    pub(crate) fn answer(&self, keyed: bool) -> Answer<'_> {
        read(&self.response, self.problem.as_deref(), keyed)
    }

    /// Whether the answer is a replay of a stored one.
    pub(crate) fn replayed(&self) -> bool {
        replayed(&self.response)
    }

    /// The wait the answer asks for.
    pub(crate) fn retry_after(&self) -> Option<Duration> {
        retry_after(self.response.headers(), SystemTime::now())
    }
}

/// The answer as the table reads it, its problem type given.
fn read<'a>(response: &Response, problem: Option<&'a str>, keyed: bool) -> Answer<'a> {
    Answer {
        status: response.status(),
        problem,
        retry_after: response.headers().contains_key(http::header::RETRY_AFTER),
        replayed: replayed(response),
        should_retry: should_retry(response),
        keyed,
    }
}

fn replayed(response: &Response) -> bool {
    let value = response.headers().get(REPLAYED);
    value.is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"))
}

/// `Stripe-Should-Retry`: `true` or `false`, else `None`.
fn should_retry(response: &Response) -> Option<bool> {
    match response.headers().get(SHOULD_RETRY)?.as_bytes() {
        b"true" => Some(true),
        b"false" => Some(false),
        _ => None,
    }
}

/// What an answer's head says of its body's reading.
pub(crate) enum Head {
    /// The status may call for a retry: the body is read (up to the limit) within the
    /// request's time, for its problem type and to see a cut.
    MayRetry,
    /// A final answer that says its length, within the limit: read whole before it is
    /// handed on, so that a cut is retried (the key replays it), but past the request's
    /// time: the server has answered.
    FinalShort,
    /// A final answer of unknown length, longer than the limit, or a stream: handed on as
    /// soon as its head arrives.
    FinalStream,
}

/// The reading an answer's head calls for, with the policy's `server_errors` and buffer
/// `limit`.
pub(crate) fn head(response: &Response, keyed: bool, server_errors: bool, limit: usize) -> Head {
    let status = response.status();
    let by_head = classify::answer(read(response, None, keyed), server_errors);
    // A 409's or a 5xx's row may depend on its problem type.
    if by_head.is_some() || status.as_u16() == 409 || status.is_server_error() {
        return Head::MayRetry;
    }
    let stream = response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|value| value.as_bytes().starts_with(b"text/event-stream"));
    let limit = u64::try_from(limit).unwrap_or(u64::MAX);
    let short = response
        .content_length()
        .is_some_and(|length| length <= limit);
    if short && !stream {
        Head::FinalShort
    } else {
        Head::FinalStream
    }
}

/// Reads up to `limit` bytes of the answer's body; a body that ends within them is handed on
/// whole, a longer one as those bytes followed by the rest as it arrives. An error here is
/// an answer cut off.
pub(crate) async fn receive(response: Response, limit: usize) -> Result<Received, reqwest::Error> {
    let url = response.url().clone();
    let (parts, mut body) = http::Response::<Body>::from(response).into_parts();
    let mut head = BytesMut::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            head.extend_from_slice(&data);
        }
        if head.len() > limit {
            let head = head.freeze();
            let rest = futures_util::stream::once(async move { Ok::<_, reqwest::Error>(head) })
                .chain(BodyDataStream::new(body));
            return Ok(Received {
                response: rebuild(parts, url, Body::wrap_stream(rest)),
                problem: None,
            });
        }
    }
    let head = head.freeze();
    let problem = problem_slug(parts.status, &head);
    Ok(Received {
        response: rebuild(parts, url, Body::from(head)),
        problem,
    })
}

/// The response of `parts` and `body`, with its URL, which reqwest keeps outside the parts.
fn rebuild(mut parts: http::response::Parts, url: Url, body: Body) -> Response {
    if let Ok(carrier) = http::Response::builder().url(url).body(()) {
        parts.extensions.extend(carrier.into_parts().0.extensions);
    }
    Response::from(http::Response::from_parts(parts, body))
}

/// The slug of a problem body's `type`, for the statuses whose row depends on it.
fn problem_slug(status: StatusCode, body: &Bytes) -> Option<String> {
    if !matches!(status.as_u16(), 409 | 500..=599) {
        return None;
    }
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    let problem_type = value.get("type")?.as_str()?;
    Some(classify::slug(problem_type).to_owned())
}

/// How an attempt that got no answer failed.
pub(crate) fn failure(error: &reqwest_middleware::Error) -> Failure {
    let reqwest_middleware::Error::Reqwest(error) = error else {
        return Failure::Other;
    };
    if error.is_builder() || error.is_redirect() || error.is_status() || error.is_decode() {
        Failure::Other
    } else if error.is_connect() {
        Failure::Connect
    } else if error.is_timeout() {
        Failure::Timeout
    } else {
        Failure::NoAnswer
    }
}
