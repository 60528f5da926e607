//! Converting between `http` responses and [`StoredResponse`] (behaviour [§6](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#6-what-is-stored), [§7](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#7-replay)).

use crate::Body;
use bytes::Bytes;
use http::header::{ACCEPT_ENCODING, CONTENT_ENCODING, CONTENT_LENGTH, DATE, SET_COOKIE};
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};
use http_body::Body as HttpBody;
use http_body_util::{BodyExt, Limited};
use idemkey_core::{BoxError, Problem, StoredResponse};

/// The request header that carries the key.
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");
/// Set to `true` on every replayed response.
pub const IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");
/// Set to `true` on a replay whose body was not stored.
pub const IDEMPOTENT_BODY_OMITTED: HeaderName = HeaderName::from_static("idempotent-body-omitted");

const HOP_BY_HOP: [&str; 6] = [
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
];

/// Whether a response header is stored for replay: not hop-by-hop (`proxy-*` included),
/// `date`, `set-cookie`, `content-length` (recomputed on replay), nor one of `per_request`.
pub fn is_stored_header(name: &HeaderName, per_request: &[HeaderName]) -> bool {
    let n = name.as_str();
    !(HOP_BY_HOP.contains(&n)
        || n.starts_with("proxy-")
        || name == DATE
        || name == SET_COOKIE
        || name == CONTENT_LENGTH
        || per_request.contains(name))
}

/// The headers of a response as stored: each name's values in their original order. Headers
/// the response's own `Connection` header names are hop-by-hop too (RFC 9110 §7.6.1), so
/// they are left out with it.
pub fn stored_headers(headers: &HeaderMap, per_request: &[HeaderName]) -> Vec<(String, Bytes)> {
    let connection_named = connection_options(headers);
    headers
        .iter()
        .filter(|(name, _)| is_stored_header(name, per_request))
        .filter(|(name, _)| !connection_named.iter().any(|named| named == name.as_str()))
        .map(|(name, value)| {
            let value = Bytes::copy_from_slice(value.as_bytes());
            (name.as_str().to_owned(), value)
        })
        .collect()
}

/// The response a retry with these request headers gets: the stored status, headers and
/// body, with `Idempotent-Replayed: true`, and `Idempotent-Body-Omitted: true` if the body
/// was not stored.
///
/// A body stored with a `Content-Encoding` (a compression layer inside the idempotency
/// layer) is replayed only to a retry whose `Accept-Encoding` names that coding; any other
/// retry gets the status and headers without the body, as if it had not been stored, rather
/// than bytes it cannot read. (A request without `Accept-Encoding` is taken to accept none.)
/// A replay whose body was not stored never declares a `Content-Encoding`.
pub fn replay_response(stored: &StoredResponse, request: &HeaderMap) -> Response<Body> {
    let encoding = stored
        .headers
        .iter()
        .find(|(name, _)| name.as_str() == CONTENT_ENCODING.as_str())
        .map(|(_, value)| value.clone());
    // A body not stored has no encoding to declare either.
    let unreadable =
        encoding.is_some_and(|coding| stored.body_omitted || !accepts_encoding(request, &coding));
    let omitted;
    let stored = if unreadable {
        let mut without = stored.clone().without_body();
        without
            .headers
            .retain(|(name, _)| name.as_str() != CONTENT_ENCODING.as_str());
        omitted = without;
        &omitted
    } else {
        stored
    };
    let mut response = to_response(stored);
    let headers = response.headers_mut();
    headers.insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    if stored.body_omitted {
        headers.insert(IDEMPOTENT_BODY_OMITTED, HeaderValue::from_static("true"));
    }
    response
}

/// Whether `Accept-Encoding` in `request` names `coding` (or `*`) with a non-zero weight.
/// `identity` is always acceptable.
fn accepts_encoding(request: &HeaderMap, coding: &[u8]) -> bool {
    let coding = String::from_utf8_lossy(coding);
    let coding = coding.trim();
    if coding.eq_ignore_ascii_case("identity") {
        return true;
    }
    let mut wildcard = false;
    for value in request.get_all(ACCEPT_ENCODING) {
        let Ok(value) = value.to_str() else { continue };
        for item in value.split(',') {
            let mut parts = item.split(';');
            let name = parts.next().unwrap_or_default().trim();
            let weight = parts
                .filter_map(|p| p.trim().strip_prefix("q="))
                .find_map(|q| q.trim().parse::<f32>().ok())
                .unwrap_or(1.0);
            if name.eq_ignore_ascii_case(coding) {
                return weight > 0.0;
            }
            wildcard |= name == "*" && weight > 0.0;
        }
    }
    wildcard
}

/// One of idemkey's `application/problem+json` responses (with `Cache-Control: no-store`).
pub fn problem_response(problem: &Problem) -> Response<Body> {
    to_response(&problem.to_stored())
}

fn to_response(stored: &StoredResponse) -> Response<Body> {
    let status = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = Response::new(Body::from(stored.body.clone()));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    for (name, value) in &stored.headers {
        // A header that no longer parses cannot be sent; skipping it beats failing the replay.
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_maybe_shared(value.clone()),
        ) else {
            continue;
        };
        headers.append(name, value);
    }
    if has_content(status) {
        headers.insert(CONTENT_LENGTH, HeaderValue::from(stored.body.len()));
    }
    response
}

fn has_content(status: StatusCode) -> bool {
    !(status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED)
}

/// Splits a handler's response into the response its first caller gets and the one stored.
///
/// The header names listed in `Connection` values, lower-cased.
fn connection_options(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all(http::header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(|option| option.trim().to_ascii_lowercase())
        .filter(|option| !option.is_empty())
        .collect()
}

/// A body of known length up to `storage_limit` bytes is read whole and stored. A body of
/// unknown length (a stream) or over the limit is passed on to the first caller untouched and
/// stored as status and headers only ([`StoredResponse::without_body`]). Fails only if
/// reading the body fails.
pub async fn split_response<B>(
    response: Response<B>,
    storage_limit: usize,
    per_request: &[HeaderName],
) -> Result<(Response<Body>, StoredResponse), BoxError>
where
    B: HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let (parts, body) = response.into_parts();
    let mut stored = StoredResponse::new(parts.status.as_u16(), Bytes::new());
    stored.headers = stored_headers(&parts.headers, per_request);
    let limit = u64::try_from(storage_limit).unwrap_or(u64::MAX);
    match body.size_hint().exact() {
        Some(len) if len <= limit => {
            let bytes = Limited::new(body, storage_limit)
                .collect()
                .await?
                .to_bytes();
            stored.body = bytes.clone();
            Ok((Response::from_parts(parts, Body::from(bytes)), stored))
        }
        _ => Ok((
            Response::from_parts(parts, Body::new(body)),
            stored.without_body(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response_with_headers() -> Response<Body> {
        Response::builder()
            .status(201)
            .header("location", "/n/1")
            .header("vary", "a")
            .header("vary", "b")
            .header("set-cookie", "s=1")
            .header("date", "today")
            .header("connection", "close")
            .header("proxy-authenticate", "x")
            .header("x-request-id", "r1")
            .header("content-length", "2")
            .body(Body::from("hi"))
            .unwrap()
    }

    #[tokio::test]
    async fn split_keeps_only_replayable_headers() {
        let excluded = [HeaderName::from_static("x-request-id")];
        let (first, stored) = split_response(response_with_headers(), 10, &excluded)
            .await
            .unwrap();
        assert_eq!(first.headers().get("set-cookie").unwrap(), "s=1");
        let names: Vec<&str> = stored.headers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["location", "vary", "vary"]);
        assert_eq!(stored.headers[2].1, "b");
        assert_eq!(stored.body, "hi");
    }

    #[test]
    fn headers_the_connection_header_names_are_not_stored() {
        let mut headers = HeaderMap::new();
        headers.append("connection", "keep-alive, X-Hop".parse().unwrap());
        headers.append("connection", "x-other".parse().unwrap());
        headers.append("x-hop", "1".parse().unwrap());
        headers.append("x-other", "2".parse().unwrap());
        headers.append("x-kept", "3".parse().unwrap());
        let stored = stored_headers(&headers, &[]);
        let names: Vec<_> = stored.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names, ["x-kept"]);
    }

    #[tokio::test]
    async fn over_the_limit_is_stored_without_body() {
        let (first, stored) = split_response(response_with_headers(), 1, &[])
            .await
            .unwrap();
        assert!(stored.body_omitted && stored.body.is_empty());
        let body = first.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, "hi");
    }

    #[test]
    fn an_encoded_body_is_replayed_only_to_a_retry_that_accepts_it() {
        let stored = StoredResponse::new(201, "gz")
            .with_header("content-encoding", "gzip")
            .with_header("location", "/n/1");
        let mut gzip = HeaderMap::new();
        gzip.insert(
            ACCEPT_ENCODING,
            HeaderValue::from_static("br;q=1, GZIP;q=0.5"),
        );
        assert_eq!(
            replay_response(&stored, &gzip).headers()[CONTENT_ENCODING],
            "gzip"
        );
        let mut refused = HeaderMap::new();
        refused.insert(ACCEPT_ENCODING, HeaderValue::from_static("gzip;q=0, *"));
        for request in [HeaderMap::new(), refused] {
            let replay = replay_response(&stored, &request);
            assert!(replay.headers().get(CONTENT_ENCODING).is_none());
            assert_eq!(replay.headers()[IDEMPOTENT_BODY_OMITTED], "true");
            assert_eq!(replay.headers()["location"], "/n/1");
            assert_eq!(replay.headers()[CONTENT_LENGTH], "0");
        }
    }

    #[test]
    fn replay_marks_and_recomputes_length() {
        let stored = StoredResponse::new(201, "abc")
            .with_header("vary", "a")
            .with_header("vary", "b");
        let replay = replay_response(&stored, &HeaderMap::new());
        assert_eq!(replay.headers()[CONTENT_LENGTH], "3");
        assert_eq!(replay.headers()[IDEMPOTENT_REPLAYED], "true");
        let vary: Vec<_> = replay.headers().get_all("vary").iter().collect();
        assert_eq!(vary, ["a", "b"]);
        let omitted = replay_response(&stored.without_body(), &HeaderMap::new());
        assert_eq!(omitted.headers()[CONTENT_LENGTH], "0");
        assert_eq!(omitted.headers()[IDEMPOTENT_BODY_OMITTED], "true");
    }
}
