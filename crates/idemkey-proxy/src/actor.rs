//! The actor of a proxied request (behaviour [§14](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#14-the-proxy)): a digest of the credential the client sent,
//! so that one credential never sees another's responses, or a name a trusted gateway set.

use std::sync::Arc;

use http::HeaderName;
use http::header::COOKIE;
use http::request::Parts;
use idemkey_tower::MakeActor;
use sha2::{Digest, Sha256};

use crate::config::ActorSource;

/// The [`MakeActor`] of the proxy.
#[derive(Clone, Debug)]
pub(crate) struct ProxyActor {
    pub(crate) source: ActorSource,
    /// With `anonymous = true`, the credential-like headers: a request without the
    /// configured credential and without any of these shares the actor `anonymous` instead
    /// of being refused; one with some of them is the actor of their digest. `None`: refused.
    pub(crate) anonymous: Option<Arc<[HeaderName]>>,
}

impl MakeActor for ProxyActor {
    fn make_actor(&self, parts: &Parts) -> Option<String> {
        let actor = match &self.source {
            ActorSource::Header(name) => parts
                .headers
                .get(name)
                .filter(|value| !value.is_empty())
                .map(|value| digest("header", value.as_bytes())),
            ActorSource::Cookie(name) => cookie(parts, name).map(|value| digest("cookie", value)),
            ActorSource::Trusted(name) => parts
                .headers
                .get(name)
                .and_then(|value| value.to_str().ok())
                .filter(|value| !value.is_empty())
                .map(|value| format!("trusted:{value}")),
        };
        actor.or_else(|| Some(anonymous(parts, self.anonymous.as_deref()?)))
    }
}

/// The actor of a request without the configured credential: `anonymous` only if it carries
/// no credential at all. A cookie, a bearer token or an API key the proxy was not told to
/// read still tells one client from another, so each gets an actor of its own, never the
/// shared one (where any client with another's key would get that client's answer).
fn anonymous(parts: &Parts, credentials: &[HeaderName]) -> String {
    let mut hash = Sha256::new().chain_update(b"credentials");
    let mut any = false;
    for name in credentials {
        for value in parts.headers.get_all(name).iter().filter(|v| !v.is_empty()) {
            any = true;
            // Neither names nor values hold a NUL: the concatenation is unambiguous.
            hash.update([0]);
            hash.update(name.as_str());
            hash.update([0]);
            hash.update(value.as_bytes());
        }
    }
    if !any {
        return "anonymous".to_owned();
    }
    format!("credentials:{}", hex::encode(&hash.finalize()[..16]))
}

/// 128 bits of SHA-256 of the credential, in hex: long enough that two credentials never
/// share an actor, and the credential itself is never stored.
fn digest(kind: &str, credential: &[u8]) -> String {
    let hash = Sha256::new()
        .chain_update(kind.as_bytes())
        .chain_update([0])
        .chain_update(credential)
        .finalize();
    format!("{kind}:{}", hex::encode(&hash[..16]))
}

/// The value of cookie `name`, from any `Cookie` header.
fn cookie<'a>(parts: &'a Parts, name: &str) -> Option<&'a [u8]> {
    parts
        .headers
        .get_all(COOKIE)
        .iter()
        .flat_map(|header| header.as_bytes().split(|&b| b == b';'))
        .filter_map(|pair| {
            let at = pair.iter().position(|&b| b == b'=')?;
            let (key, value) = (pair[..at].trim_ascii(), &pair[at + 1..]);
            (key == name.as_bytes()).then_some(value.trim_ascii())
        })
        .find(|value| !value.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(headers: &[(&str, &str)]) -> Parts {
        let mut request = http::Request::post("/x");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.body(()).unwrap().into_parts().0
    }

    #[test]
    fn credentials_are_digested_and_never_kept() {
        let actor = ProxyActor {
            source: ActorSource::Header(http::header::AUTHORIZATION),
            anonymous: None,
        };
        let a = actor
            .make_actor(&parts(&[("authorization", "Bearer a")]))
            .unwrap();
        let b = actor
            .make_actor(&parts(&[("authorization", "Bearer b")]))
            .unwrap();
        assert_ne!(a, b);
        assert!(!a.contains("Bearer"));
        assert_eq!(actor.make_actor(&parts(&[])), None);
    }

    #[test]
    fn cookies_and_trusted_headers_and_anonymous() {
        let by_cookie = ProxyActor {
            source: ActorSource::Cookie("session".into()),
            anonymous: None,
        };
        let cookies = [("cookie", "theme=dark; session=s1")];
        assert!(
            by_cookie
                .make_actor(&parts(&cookies))
                .unwrap()
                .starts_with("cookie:")
        );
        assert_eq!(
            by_cookie.make_actor(&parts(&[("cookie", "session=")])),
            None
        );
        let trusted = ProxyActor {
            source: ActorSource::Trusted(http::HeaderName::from_static("x-user")),
            anonymous: Some(Arc::new([http::header::COOKIE])),
        };
        let named = trusted.make_actor(&parts(&[("x-user", "u7")]));
        assert_eq!(named.as_deref(), Some("trusted:u7"));
        assert_eq!(
            trusted.make_actor(&parts(&[])).as_deref(),
            Some("anonymous")
        );
        let with_cookie = trusted.make_actor(&parts(&[("cookie", "a=1")])).unwrap();
        assert!(with_cookie.starts_with("credentials:"), "{with_cookie}");
        assert!(!with_cookie.contains("a=1"));
    }
}
