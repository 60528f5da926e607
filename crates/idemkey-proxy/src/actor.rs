//! The actor of a proxied request (behaviour [§14](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#14-the-proxy)): a digest of the credential the client sent,
//! so that one credential never sees another's responses, or a name a trusted gateway set.
//! The digest is an HMAC keyed by the secret behind derived keys, so the stored actors
//! cannot be searched with a dictionary of credentials.

use std::sync::{Arc, OnceLock};

use hmac::{Hmac, Mac};
use http::header::COOKIE;
use http::request::Parts;
use http::{HeaderMap, HeaderName};
use idemkey_tower::MakeActor;
use sha2::{Digest, Sha256};

use crate::config::{ActorConfig, ActorSource};
use crate::error::Result;

/// The [`MakeActor`] of the proxy.
#[derive(Clone, Debug)]
pub(crate) struct ProxyActor {
    pub(crate) source: ActorSource,
    /// With `anonymous = true`, the credential-like headers: a request without the
    /// configured credential and without any of these shares the actor `anonymous` instead
    /// of being refused; one with some of them is the actor of their digest. `None`: refused.
    pub(crate) anonymous: Option<Arc<[HeaderName]>>,
    /// The key of the digests.
    pub(crate) key: ActorKey,
    /// Whether a keyed request first looks for a record under the plain digest of earlier
    /// versions (`earlier_digests`).
    pub(crate) earlier: bool,
}

/// The key of actor digests, `HMAC(secret, "idemkey-proxy actor")`: set once, from the
/// configured secret or the store's (loaded by the first request that needs it).
#[derive(Clone, Default)]
pub(crate) struct ActorKey(Arc<OnceLock<Arc<[u8]>>>);

impl ActorKey {
    /// Whether the key is set.
    pub(crate) fn is_set(&self) -> bool {
        self.0.get().is_some()
    }

    /// Sets the key from `secret`, unless it is set already.
    pub(crate) fn set_from(&self, secret: &[u8]) {
        let key = hmac(secret, &[b"idemkey-proxy actor"]);
        let _ = self.0.set(Arc::from(key.as_slice()));
    }

    fn get(&self) -> Option<&[u8]> {
        self.0.get().map(AsRef::as_ref)
    }
}

impl std::fmt::Debug for ActorKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key is left out on purpose: Debug output ends up in logs.
        f.debug_struct("ActorKey")
            .field("set", &self.is_set())
            .finish()
    }
}

/// The actor of an earlier version's record that this request's credential made, found in
/// the store before the request reaches its route (see `earlier`): its retry replays.
#[derive(Clone, Debug)]
pub(crate) struct EarlierActor(pub(crate) String);

impl MakeActor for ProxyActor {
    fn make_actor(&self, parts: &Parts) -> Option<String> {
        if let Some(EarlierActor(actor)) = parts.extensions.get() {
            return Some(actor.clone());
        }
        // Never unset behind the proxy's front, which loads it first; unset, nobody shares.
        let key = self.key.get()?;
        let actor = match &self.source {
            ActorSource::Header(name) => parts
                .headers
                .get(name)
                .filter(|value| !value.is_empty())
                .map(|value| digest(key, "header", value.as_bytes())),
            ActorSource::Cookie(name) => {
                cookie(parts, name).map(|value| digest(key, "cookie", value))
            }
            ActorSource::Trusted(name) => parts
                .headers
                .get(name)
                .and_then(|value| value.to_str().ok())
                .filter(|value| !value.is_empty())
                .map(|value| format!("trusted:{value}")),
        };
        actor.or_else(|| Some(anonymous(parts, self.anonymous.as_deref()?, key)))
    }
}

impl ProxyActor {
    /// The actor versions before the keyed digest gave this request's credential: 128 bits of
    /// plain SHA-256 of it. `None` for other sources, whose actors did not change.
    pub(crate) fn unkeyed(&self, parts: &Parts) -> Option<String> {
        let (kind, credential) = match &self.source {
            ActorSource::Header(name) => (
                "header",
                parts
                    .headers
                    .get(name)
                    .filter(|v| !v.is_empty())?
                    .as_bytes(),
            ),
            ActorSource::Cookie(name) => ("cookie", cookie(parts, name)?),
            ActorSource::Trusted(_) => return None,
        };
        let hash = Sha256::new()
            .chain_update(kind.as_bytes())
            .chain_update([0])
            .chain_update(credential)
            .finalize();
        Some(format!("{kind}:{}", hex::encode(&hash[..16])))
    }
}

/// The actors under which the proxy keeps the records of a request carrying `headers`, with
/// `config`'s actor settings and `secret`, the secret behind derived keys (the proxy's
/// `--secret`, or else the store's own): the keyed digest first, then the plain digest that
/// versions before it gave the same credential, if any (their records are still honoured
/// until they expire). A trusted gateway's header gives its value as the actor.
///
/// Empty when the headers carry no credential the proxy reads: such a request is refused, or
/// with `anonymous = true` shares the actor `anonymous`, which names no credential. For tools
/// that forget one credential's records (`idemkey forget --proxy-credential`); the credential
/// is neither kept nor logged.
pub fn request_actors(
    config: &ActorConfig,
    secret: &[u8],
    headers: &HeaderMap,
) -> Result<Vec<String>> {
    let key = ActorKey::default();
    key.set_from(secret);
    let actor = ProxyActor {
        source: config.source()?,
        anonymous: config
            .anonymous
            .then(|| config.credential_headers())
            .transpose()?
            .map(Into::into),
        key,
        earlier: config.earlier_digests,
    };
    let mut request = http::Request::new(());
    *request.headers_mut() = headers.clone();
    let (parts, ()) = request.into_parts();
    let mut actors: Vec<String> = actor
        .make_actor(&parts)
        .filter(|actor| actor != "anonymous")
        .into_iter()
        .collect();
    if !actors.is_empty() {
        actors.extend(actor.unkeyed(&parts));
    }
    Ok(actors)
}

/// The actor of a request without the configured credential: `anonymous` only if it carries
/// no credential at all. A cookie, a bearer token or an API key the proxy was not told to
/// read still tells one client from another, so each gets an actor of its own, never the
/// shared one (where any client with another's key would get that client's answer).
fn anonymous(parts: &Parts, credentials: &[HeaderName], key: &[u8]) -> String {
    let mut message: Vec<&[u8]> = Vec::new();
    for name in credentials {
        for value in parts.headers.get_all(name).iter().filter(|v| !v.is_empty()) {
            message.extend([name.as_str().as_bytes(), value.as_bytes()]);
        }
    }
    if message.is_empty() {
        return "anonymous".to_owned();
    }
    format!("credentials:{}", hex::encode(&hmac(key, &message)[..16]))
}

/// 128 bits of the HMAC of the credential under the actor key, in hex: long enough that two
/// credentials never share an actor; the credential is never stored, and without the key
/// no guess of it can be checked against the stored actors.
fn digest(key: &[u8], kind: &str, credential: &[u8]) -> String {
    format!(
        "{kind}:{}",
        hex::encode(&hmac(key, &[kind.as_bytes(), credential])[..16])
    )
}

/// HMAC-SHA-256 of `parts` under `key`, each part followed by a NUL: neither header names
/// nor values, nor the kinds, hold one, so the message is unambiguous.
fn hmac(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
    for part in parts {
        mac.update(part);
        mac.update(&[0]);
    }
    mac.finalize().into_bytes().to_vec()
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

    fn keyed() -> ActorKey {
        let key = ActorKey::default();
        key.set_from(b"secret");
        key
    }

    #[test]
    fn credentials_are_digested_and_never_kept() {
        let actor = ProxyActor {
            source: ActorSource::Header(http::header::AUTHORIZATION),
            anonymous: None,
            key: keyed(),
            earlier: false,
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
        // Another secret, another digest: the key is what a guess cannot know.
        let other = ProxyActor {
            key: ActorKey::default(),
            ..actor.clone()
        };
        other.key.set_from(b"another secret");
        let c = other
            .make_actor(&parts(&[("authorization", "Bearer a")]))
            .unwrap();
        assert_ne!(a, c);
        let unkeyed = actor.unkeyed(&parts(&[("authorization", "Bearer a")]));
        assert!(unkeyed.is_some_and(|unkeyed| unkeyed != a));
    }

    #[test]
    fn request_actors_are_the_proxys_own() {
        let config = ActorConfig::default();
        let headers = parts(&[("authorization", "Bearer a")]).headers;
        let actors = request_actors(&config, b"secret", &headers).unwrap();
        let proxy = ProxyActor {
            source: ActorSource::Header(http::header::AUTHORIZATION),
            anonymous: None,
            key: keyed(),
            earlier: false,
        };
        let request = parts(&[("authorization", "Bearer a")]);
        let expected = [proxy.make_actor(&request), proxy.unkeyed(&request)];
        assert_eq!(actors, expected.map(Option::unwrap));
        let other = parts(&[("x-api-key", "a")]).headers;
        assert!(
            request_actors(&config, b"secret", &other)
                .unwrap()
                .is_empty()
        );
        let anonymous = ActorConfig {
            anonymous: true,
            ..ActorConfig::default()
        };
        assert!(
            request_actors(&anonymous, b"secret", &HeaderMap::new())
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn cookies_and_trusted_headers_and_anonymous() {
        let by_cookie = ProxyActor {
            source: ActorSource::Cookie("session".into()),
            anonymous: None,
            key: keyed(),
            earlier: false,
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
            key: keyed(),
            earlier: false,
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
