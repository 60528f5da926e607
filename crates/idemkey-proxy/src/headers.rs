//! Hop-by-hop and forwarding headers, handled as proxies do (RFC 9110 §7.6.1, RFC 7239): a
//! hop-by-hop header never crosses the proxy, so it is neither forwarded nor stored.

use std::net::{IpAddr, SocketAddr};

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

/// Removes the hop-by-hop headers and those the `Connection` header names, but for `Host`:
/// it is end to end (RFC 9110 §7.2), and the proxy names it to the upstream, so a
/// nomination of it is ignored. `Transfer-Encoding` goes too: hyper frames each hop's body
/// itself.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .filter(|name| name != HOST)
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

/// Sets the forwarding headers from what the proxy saw, and from nothing a client sent: the
/// proxy is the first hop an upstream may trust, so any client's `Forwarded`, `X-Real-IP` or
/// `X-Forwarded-*` (`-Port`, `-Prefix`, ...) is removed. `X-Forwarded-For` and `Forwarded`
/// name the peer, `X-Forwarded-Host` and `Forwarded`'s `host` the host it asked for (the
/// `Host` admitted before any route), `X-Forwarded-Proto` the scheme (`http`). `Host`
/// itself is left for the client to set from the upstream's address.
pub(crate) fn set_forwarded(headers: &mut HeaderMap, peer: Option<SocketAddr>) {
    let host = headers
        .remove(HOST)
        .filter(|host| !host.is_empty() && host.to_str().is_ok());
    let forged: Vec<HeaderName> = headers
        .keys()
        .filter(|name| {
            let name = name.as_str();
            name.starts_with("x-forwarded-") || name == "forwarded" || name == "x-real-ip"
        })
        .cloned()
        .collect();
    for name in forged {
        headers.remove(name);
    }
    let mut forwarded = Vec::new();
    if let Some(peer) = peer {
        let ip = peer.ip();
        if let Ok(value) = HeaderValue::from_str(&ip.to_string()) {
            headers.insert(X_FORWARDED_FOR, value);
        }
        forwarded.push(match ip {
            IpAddr::V4(ip) => format!("for={ip}"),
            IpAddr::V6(ip) => format!("for={}", quoted(&format!("[{ip}]"))),
        });
    }
    if let Some(host) = host {
        forwarded.push(format!(
            "host={}",
            quoted(host.to_str().unwrap_or_default())
        ));
        headers.insert(X_FORWARDED_HOST, host);
    }
    forwarded.push("proto=http".to_owned());
    if let Ok(value) = HeaderValue::from_str(&forwarded.join(";")) {
        headers.insert(FORWARDED, value);
    }
    headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static("http"));
}

/// `value` as an RFC 7239 quoted-string (RFC 9110 §5.6.4): `"` and `\` escaped, so that no
/// value can close the string and add an element or a parameter of its own.
fn quoted(value: &str) -> String {
    let mut quoted = String::with_capacity(value.len() + 2);
    quoted.push('"');
    for c in value.chars() {
        if matches!(c, '"' | '\\') {
            quoted.push('\\');
        }
        quoted.push(c);
    }
    quoted.push('"');
    quoted
}

const FORWARDED: HeaderName = HeaderName::from_static("forwarded");
const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");

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
    fn forwarding_headers_are_the_proxys_own() {
        let mut headers = HeaderMap::new();
        headers.insert("host", HeaderValue::from_static("api.example"));
        headers.insert("x-forwarded-for", HeaderValue::from_static("10.0.0.1"));
        headers.insert("x-forwarded-port", HeaderValue::from_static("443"));
        headers.insert("forwarded", HeaderValue::from_static("for=10.0.0.1"));
        headers.insert("x-real-ip", HeaderValue::from_static("10.0.0.1"));
        set_forwarded(&mut headers, Some("[::1]:4000".parse().unwrap()));
        assert_eq!(headers["x-forwarded-for"], "::1");
        assert_eq!(headers["x-forwarded-host"], "api.example");
        assert_eq!(headers["x-forwarded-proto"], "http");
        assert_eq!(
            headers["forwarded"],
            "for=\"[::1]\";host=\"api.example\";proto=http"
        );
        assert_eq!(headers.len(), 4, "{headers:?}");
    }

    #[test]
    fn a_quoted_host_cannot_add_an_element() {
        let mut headers = HeaderMap::new();
        headers.insert("host", HeaderValue::from_static("a\", for=6.6.6.6;x=\\"));
        set_forwarded(&mut headers, Some("127.0.0.9:4000".parse().unwrap()));
        assert_eq!(
            headers["forwarded"],
            "for=127.0.0.9;host=\"a\\\", for=6.6.6.6;x=\\\\\";proto=http"
        );
    }

    #[test]
    fn connection_cannot_nominate_the_host() {
        let mut headers = HeaderMap::new();
        headers.insert("connection", HeaderValue::from_static("close, host"));
        headers.insert("host", HeaderValue::from_static("api.example"));
        strip_hop_by_hop(&mut headers);
        assert_eq!(headers["host"], "api.example");
    }
}
