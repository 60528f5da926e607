//! Redirects, followed by the middleware itself so that each hop is a request of its own: its
//! URL checked against the declared servers, its key dropped when it leaves the origin, its
//! retries decided for its own URL.
//!
//! The rules are the ones reqwest and browsers follow (RFC 9110 §15.4): 301 and 302 turn a
//! POST into a GET, 303 turns anything but HEAD into a GET, both without the body; 307 and 308
//! keep the method and the body. A hop to another origin (scheme, host or port) loses the
//! credentials reqwest drops (`Authorization`, `Cookie`, `Proxy-Authorization`,
//! `WWW-Authenticate`) and the `Idempotency-Key`: the key names a request to the first origin.

use http::header::{
    AUTHORIZATION, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE, COOKIE, LOCATION,
    PROXY_AUTHORIZATION, TRANSFER_ENCODING, WWW_AUTHENTICATE,
};
use http::{HeaderMap, Method, StatusCode};
use reqwest::{Request, Url};

use crate::key::IDEMPOTENCY_KEY;

/// Whether an answer of `status` is a redirect the middleware follows.
pub(crate) fn is_redirect(status: StatusCode) -> bool {
    matches!(status.as_u16(), 301 | 302 | 303 | 307 | 308)
}

/// The request for the hop that a redirect of `status` to `location` asks for after `sent`;
/// `None` when it cannot be followed (no usable `Location`, a scheme other than http(s), or a
/// body that must be sent again and cannot be: a stream).
pub(crate) fn next_hop(sent: &Request, status: StatusCode, headers: &HeaderMap) -> Option<Request> {
    let location = headers.get(LOCATION)?.to_str().ok()?;
    let url = sent.url().join(location).ok()?;
    if !matches!(url.scheme(), "http" | "https") {
        return None;
    }
    let method = sent.method();
    let (method, keeps_body) = match status.as_u16() {
        301 | 302 if method == Method::POST => (Method::GET, false),
        303 if method != Method::HEAD => (Method::GET, false),
        301 | 302 | 303 | 307 | 308 => (method.clone(), true),
        _ => return None,
    };
    let mut next = if keeps_body {
        sent.try_clone()?
    } else {
        let mut bodiless = Request::new(method.clone(), url.clone());
        *bodiless.headers_mut() = sent.headers().clone();
        *bodiless.timeout_mut() = sent.timeout().copied();
        *bodiless.version_mut() = sent.version();
        for name in [
            CONTENT_TYPE,
            CONTENT_LENGTH,
            CONTENT_ENCODING,
            TRANSFER_ENCODING,
        ] {
            bodiless.headers_mut().remove(name);
        }
        bodiless
    };
    *next.method_mut() = method;
    *next.url_mut() = url;
    if !same_origin(sent.url(), next.url()) {
        let headers = next.headers_mut();
        for name in [AUTHORIZATION, COOKIE, PROXY_AUTHORIZATION, WWW_AUTHENTICATE] {
            headers.remove(name);
        }
        headers.remove("cookie2");
        headers.remove(IDEMPOTENCY_KEY);
    }
    Some(next)
}

/// Same scheme, host and port.
pub(crate) fn same_origin(a: &Url, b: &Url) -> bool {
    a.scheme() == b.scheme()
        && a.host_str() == b.host_str()
        && a.port_or_known_default() == b.port_or_known_default()
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    fn sent(method: Method, url: &str) -> Request {
        let mut request = Request::new(method, url.parse().unwrap());
        let headers = request.headers_mut();
        headers.insert(IDEMPOTENCY_KEY, HeaderValue::from_static("\"k\""));
        headers.insert(AUTHORIZATION, HeaderValue::from_static("Bearer t"));
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        *request.body_mut() = Some("{}".into());
        request
    }

    fn to(location: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(LOCATION, HeaderValue::from_str(location).unwrap());
        headers
    }

    fn hop(method: Method, status: u16, location: &str) -> Option<Request> {
        let sent = sent(method, "http://a.example/v1/notes");
        next_hop(&sent, StatusCode::from_u16(status).unwrap(), &to(location))
    }

    fn body(request: &Request) -> Option<&[u8]> {
        request.body().and_then(reqwest::Body::as_bytes)
    }

    #[test]
    fn a_307_or_308_keeps_the_method_the_body_and_on_the_origin_the_key() {
        for status in [307, 308] {
            let next = hop(Method::POST, status, "/v2/notes").unwrap();
            assert_eq!(next.method(), Method::POST);
            assert_eq!(next.url().as_str(), "http://a.example/v2/notes");
            assert_eq!(body(&next), Some(&b"{}"[..]));
            assert_eq!(next.headers()[IDEMPOTENCY_KEY], "\"k\"");
            assert_eq!(next.headers()[AUTHORIZATION], "Bearer t");
        }
    }

    #[test]
    fn a_hop_to_another_origin_loses_the_key_and_the_credentials() {
        for location in [
            "http://b.example/v1/notes",
            "https://a.example/v1/notes",
            "http://a.example:8080/v1/notes",
        ] {
            let next = hop(Method::POST, 307, location).unwrap();
            assert!(!next.headers().contains_key(IDEMPOTENCY_KEY), "{location}");
            assert!(!next.headers().contains_key(AUTHORIZATION), "{location}");
            assert_eq!(body(&next), Some(&b"{}"[..]));
        }
    }

    #[test]
    fn a_post_redirected_by_301_302_or_303_becomes_a_get_without_its_body() {
        for status in [301, 302, 303] {
            let next = hop(Method::POST, status, "/v1/notes/7").unwrap();
            assert_eq!(next.method(), Method::GET);
            assert!(next.body().is_none());
            assert!(!next.headers().contains_key(CONTENT_TYPE));
        }
        assert_eq!(hop(Method::PUT, 303, "/x").unwrap().method(), Method::GET);
        assert_eq!(hop(Method::PUT, 301, "/x").unwrap().method(), Method::PUT);
        assert_eq!(hop(Method::HEAD, 303, "/x").unwrap().method(), Method::HEAD);
    }

    #[test]
    fn a_redirect_without_a_usable_location_is_not_followed() {
        let sent = sent(Method::POST, "http://a.example/v1/notes");
        let status = StatusCode::TEMPORARY_REDIRECT;
        assert!(next_hop(&sent, status, &HeaderMap::new()).is_none());
        assert!(next_hop(&sent, status, &to("ftp://a.example/x")).is_none());
        assert!(next_hop(&sent, StatusCode::NOT_MODIFIED, &to("/x")).is_none());
    }

    #[test]
    fn a_stream_body_cannot_follow_a_307() {
        let mut sent = sent(Method::POST, "http://a.example/v1/notes");
        let stream = futures_util::stream::iter([Ok::<_, std::io::Error>("{}")]);
        *sent.body_mut() = Some(reqwest::Body::wrap_stream(stream));
        let status = StatusCode::TEMPORARY_REDIRECT;
        assert!(next_hop(&sent, status, &to("/v2")).is_none());
        let get = next_hop(&sent, StatusCode::SEE_OTHER, &to("/v2")).unwrap();
        assert!(get.body().is_none());
    }
}
