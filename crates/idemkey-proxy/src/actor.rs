//! The actor of a proxied request (behaviour [§14](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#14-the-proxy)): a digest of the credential the client sent,
//! so that one credential never sees another's responses, or a name a trusted gateway set.

use http::header::COOKIE;
use http::request::Parts;
use idemkey_tower::MakeActor;
use sha2::{Digest, Sha256};

use crate::config::ActorSource;

/// The [`MakeActor`] of the proxy.
#[derive(Clone, Debug)]
pub(crate) struct ProxyActor {
    pub(crate) source: ActorSource,
    /// Requests without a credential share the actor `anonymous` instead of being refused.
    pub(crate) anonymous: bool,
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
        actor.or_else(|| self.anonymous.then(|| "anonymous".to_owned()))
    }
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
            anonymous: false,
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
            anonymous: false,
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
            anonymous: true,
        };
        let named = trusted.make_actor(&parts(&[("x-user", "u7")]));
        assert_eq!(named.as_deref(), Some("trusted:u7"));
        assert_eq!(
            trusted.make_actor(&parts(&[])).as_deref(),
            Some("anonymous")
        );
    }
}
