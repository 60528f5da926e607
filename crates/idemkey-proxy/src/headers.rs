//! Hop-by-hop and forwarding headers, handled as proxies do (RFC 9110 §7.6.1, RFC 7239): a
//! hop-by-hop header never crosses the proxy, so it is neither forwarded nor stored.

use std::net::SocketAddr;

use http::Method;
use http::header::{
    CONNECTION, CONTENT_LENGTH, HOST, HeaderMap, HeaderName, HeaderValue, TRANSFER_ENCODING,
};

/// The hop-by-hop headers every proxy removes, besides those `Connection` names.
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "upgrade",
];

/// Removes the hop-by-hop headers and those the `Connection` header names.
/// `Transfer-Encoding` goes too: hyper frames each hop's body itself.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
    headers.remove(TRANSFER_ENCODING);
}

/// Whether an answer is framed both by `Transfer-Encoding` and by `Content-Length`: a
/// message that may be smuggling another (RFC 9112 §6.3), so a failure of the upstream.
pub(crate) fn framed_twice(headers: &HeaderMap) -> bool {
    headers.contains_key(TRANSFER_ENCODING) && headers.contains_key(CONTENT_LENGTH)
}

/// Removes the upstream's `Content-Length` from an answer that has a body: the client's
/// connection is framed by the proxy, and hyper sets the length from the body it sends. The
/// answer to a `HEAD` keeps it, as no body follows it.
pub(crate) fn strip_length(headers: &mut HeaderMap, method: &Method) {
    if method != Method::HEAD {
        headers.remove(CONTENT_LENGTH);
    }
}

/// Adds the client's address and the host it asked for: `X-Forwarded-For` (appended),
/// `X-Forwarded-Host`, `X-Forwarded-Proto` and `Forwarded`. The `Host` header is left for
/// the client to set from the upstream's address.
pub(crate) fn add_forwarded(headers: &mut HeaderMap, peer: Option<SocketAddr>) {
    let host = headers.remove(HOST);
    if let Some(peer) = peer {
        let ip = peer.ip().to_string();
        let value = match headers.get("x-forwarded-for").and_then(|v| v.to_str().ok()) {
            Some(earlier) => format!("{earlier}, {ip}"),
            None => ip.clone(),
        };
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert("x-forwarded-for", value);
        }
        let node = if peer.is_ipv6() {
            format!("\"[{ip}]\"")
        } else {
            ip
        };
        let mut forwarded = format!("for={node};proto=http");
        if let Some(host) = host.as_ref().and_then(|h| h.to_str().ok()) {
            forwarded.push_str(&format!(";host=\"{host}\""));
        }
        if let Ok(value) = HeaderValue::from_str(&forwarded) {
            headers.append("forwarded", value);
        }
    }
    if let Some(host) = host {
        headers.insert("x-forwarded-host", host);
    }
    headers.insert("x-forwarded-proto", HeaderValue::from_static("http"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_and_those_named_by_connection_go() {
        let mut headers = HeaderMap::new();
        headers.insert(
            "connection",
            HeaderValue::from_static("keep-alive, x-secret-hop"),
        );
        headers.insert("x-secret-hop", HeaderValue::from_static("1"));
        headers.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        headers.insert("transfer-encoding", HeaderValue::from_static("chunked"));
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        strip_hop_by_hop(&mut headers);
        let left: Vec<_> = headers.keys().map(HeaderName::as_str).collect();
        assert_eq!(left, ["content-type"]);
    }

    #[test]
    fn only_a_head_answer_keeps_the_upstreams_length() {
        let mut headers = HeaderMap::new();
        headers.insert("content-length", HeaderValue::from_static("5"));
        assert!(!framed_twice(&headers));
        strip_length(&mut headers, &Method::HEAD);
        assert_eq!(headers["content-length"], "5");
        headers.insert("transfer-encoding", HeaderValue::from_static("chunked"));
        assert!(framed_twice(&headers));
        strip_length(&mut headers, &Method::GET);
        assert!(headers.get("content-length").is_none());
    }

    #[test]
    fn forwarding_headers_name_the_client_and_host() {
        let mut headers = HeaderMap::new();
        headers.insert("host", HeaderValue::from_static("api.example"));
        headers.insert("x-forwarded-for", HeaderValue::from_static("10.0.0.1"));
        add_forwarded(&mut headers, Some("127.0.0.9:4000".parse().unwrap()));
        assert_eq!(headers["x-forwarded-for"], "10.0.0.1, 127.0.0.9");
        assert_eq!(headers["x-forwarded-host"], "api.example");
        assert_eq!(
            headers["forwarded"],
            "for=127.0.0.9;proto=http;host=\"api.example\""
        );
        assert!(headers.get("host").is_none());
    }
}
