//! The host a client asked for (RFC 9110 §7.2, RFC 9112 §3.2, RFC 9113 §8.3.1): the one
//! value the proxy names to the upstream in `X-Forwarded-Host` and `Forwarded`, so it is
//! one value, and a plain one.

use http::header::HOST;
use http::{HeaderValue, Request, Version};

/// Why a request's host is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BadHost {
    /// An HTTP/1.1 request without `Host`.
    Missing,
    /// More than one `Host`.
    Doubled,
    /// Not a name, an IPv4 or a bracketed IPv6 address with an optional port.
    Malformed,
    /// HTTP/2's `:authority` and `Host` name different hosts.
    Conflicting,
}

impl BadHost {
    /// What the client is told.
    pub(crate) fn detail(self) -> &'static str {
        match self {
            Self::Missing => "an HTTP/1.1 request must have a Host header",
            Self::Doubled => "a request must have one Host header",
            Self::Malformed => {
                "the host must be a name, an IPv4 address or a bracketed IPv6 address, \
                 with an optional port"
            }
            Self::Conflicting => "the Host header and :authority name different hosts",
        }
    }
}

/// The host of `request`: its target's authority (HTTP/2's `:authority`, an absolute-form
/// target), else its `Host` header; `None` when it names none (HTTP/1.0 without `Host`, an
/// empty `Host`).
pub(crate) fn seen<B>(request: &Request<B>) -> Result<Option<HeaderValue>, BadHost> {
    let mut headers = request.headers().get_all(HOST).iter();
    let header = headers.next().filter(|value| !value.is_empty());
    if headers.next().is_some() {
        return Err(BadHost::Doubled);
    }
    if header.is_some_and(|value| !well_formed(value.as_bytes())) {
        return Err(BadHost::Malformed);
    }
    let authority = match request.uri().authority() {
        Some(authority) if well_formed(authority.as_str().as_bytes()) => {
            Some(HeaderValue::from_str(authority.as_str()).map_err(|_| BadHost::Malformed)?)
        }
        Some(_) => return Err(BadHost::Malformed),
        None => None,
    };
    let missing = request.version() == Version::HTTP_11 && request.headers().get(HOST).is_none();
    match (authority, header) {
        _ if missing => Err(BadHost::Missing),
        // HTTP/1.1 ignores `Host` beside an absolute-form target (RFC 9112 §3.2.2); HTTP/2
        // has them name one host.
        (Some(authority), Some(header))
            if request.version() >= Version::HTTP_2
                && !authority.as_bytes().eq_ignore_ascii_case(header.as_bytes()) =>
        {
            Err(BadHost::Conflicting)
        }
        (Some(authority), _) => Ok(Some(authority)),
        (None, header) => Ok(header.cloned()),
    }
}

/// Whether `host` is `NAME[:PORT]`, `IPv4[:PORT]` or `[IPv6][:PORT]`. Stricter than RFC
/// 3986's reg-name: no percent-encoding, no sub-delimiters (`,` `;` `=` ...) nor userinfo,
/// which upstreams split forwarding headers on.
fn well_formed(host: &[u8]) -> bool {
    let (name_ok, port) = match host.strip_prefix(b"[") {
        Some(rest) => match rest.iter().position(|&b| b == b']') {
            Some(end) => (ipv6_literal(&rest[..end]), &rest[end + 1..]),
            None => return false,
        },
        None => {
            let end = host.iter().position(|&b| b == b':').unwrap_or(host.len());
            (name(&host[..end]), &host[end..])
        }
    };
    name_ok
        && (port.is_empty()
            || port.strip_prefix(b":").is_some_and(|digits| {
                (1..=5).contains(&digits.len()) && digits.iter().all(u8::is_ascii_digit)
            }))
}

/// A DNS name or IPv4 address: unreserved characters only.
fn name(name: &[u8]) -> bool {
    !name.is_empty()
        && name
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'))
}

fn ipv6_literal(literal: &[u8]) -> bool {
    !literal.is_empty()
        && literal
            .iter()
            .all(|&b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(version: Version, uri: &str, hosts: &[&str]) -> Request<()> {
        let mut request = Request::get(uri).version(version);
        for host in hosts {
            request = request.header(HOST, *host);
        }
        request.body(()).unwrap()
    }

    fn seen_as(version: Version, uri: &str, hosts: &[&str]) -> Result<Option<String>, BadHost> {
        seen(&request(version, uri, hosts))
            .map(|host| host.map(|value| value.to_str().unwrap().to_owned()))
    }

    #[test]
    fn the_host_is_the_targets_authority_or_the_one_host_header() {
        let ok = |host: &str| Ok(Some(host.to_owned()));
        assert_eq!(
            seen_as(Version::HTTP_11, "/x", &["a.example:8080"]),
            ok("a.example:8080")
        );
        assert_eq!(seen_as(Version::HTTP_11, "/x", &[""]), Ok(None));
        assert_eq!(seen_as(Version::HTTP_10, "/x", &[]), Ok(None));
        assert_eq!(
            seen_as(Version::HTTP_2, "http://[::1]:80/x", &[]),
            ok("[::1]:80")
        );
        assert_eq!(
            seen_as(Version::HTTP_2, "http://b.example/x", &["B.example"]),
            ok("b.example")
        );
        // An absolute-form target's authority wins over `Host` in HTTP/1.1.
        assert_eq!(
            seen_as(Version::HTTP_11, "http://b.example/x", &["a.example"]),
            ok("b.example")
        );
    }

    #[test]
    fn a_missing_doubled_malformed_or_conflicting_host_is_refused() {
        assert_eq!(seen_as(Version::HTTP_11, "/x", &[]), Err(BadHost::Missing));
        assert_eq!(
            seen_as(Version::HTTP_11, "/x", &["a", "a"]),
            Err(BadHost::Doubled)
        );
        assert_eq!(
            seen_as(Version::HTTP_10, "/x", &["a", ""]),
            Err(BadHost::Doubled)
        );
        for bad in [
            "a\"b", "a,b", "a;b", "u@a", "a:", "a:123456", "[::1", "[]", "[g::]", ":80", "a%2eb",
        ] {
            assert_eq!(
                seen_as(Version::HTTP_11, "/x", &[bad]),
                Err(BadHost::Malformed),
                "{bad}"
            );
        }
        assert_eq!(
            seen_as(Version::HTTP_2, "http://b.example/x", &["a.example"]),
            Err(BadHost::Conflicting)
        );
        assert_eq!(
            seen_as(Version::HTTP_2, "http://u@b.example/x", &[]),
            Err(BadHost::Malformed)
        );
    }
}
