//! The proxy's configuration file (`idemkey proxy --config FILE`): what flags cannot say
//! well, in TOML (behaviour [§14](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#14-the-proxy)). Every setting has a default, so the file, and each of its
//! tables, is optional.

use std::collections::HashSet;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use http::{HeaderName, Method, StatusCode, header};
use serde::Deserialize;

use crate::caps::{CapValue, actor_caps};
use crate::error::{Error, Result};

/// The whole file. `Default` is an empty file.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyConfig {
    /// Most live records one actor may hold (`unlimited` for none); a request that would
    /// create one more is answered 429 `actor-cap-reached`, never forwarded. Unset: none,
    /// unless [`crate::ProxyBuilder::actor_caps`] says otherwise (`idemkey proxy` has a
    /// default).
    #[serde(default)]
    pub max_records_per_actor: Option<CapValue>,
    /// Most bytes of stored answers one actor may hold (`64MiB`, `500KiB`, `1000000`,
    /// `unlimited`); past it, new keys are answered 429 `actor-cap-reached`. Unset: none, as
    /// above.
    #[serde(default)]
    pub max_bytes_per_actor: Option<CapValue>,
    /// The covered routes, first match wins. None: POST and PATCH on every path, key optional.
    #[serde(default, rename = "route")]
    pub routes: Vec<RouteConfig>,
    /// Who the actor of a request is.
    #[serde(default)]
    pub actor: ActorConfig,
    /// How the upstream is called.
    #[serde(default)]
    pub upstream: UpstreamConfig,
}

/// One covered route: methods and a path pattern, with its own settings.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// Methods covered (default POST and PATCH).
    #[serde(default = "default_methods")]
    pub methods: Vec<String>,
    /// An exact path (`/v1/payments`), or a prefix ending in `*` (`/v1/*`, `*` for all).
    #[serde(default = "default_path")]
    pub path: String,
    /// Whether a request without a key is refused (400 `key-missing`) or forwarded unrecorded.
    #[serde(default)]
    pub require_key: bool,
    /// The status of `key-reused` (default 422).
    pub mismatch_status: Option<u16>,
    /// How long a duplicate waits for a running original before 409 (default: no wait).
    pub wait_in_flight: Option<String>,
    /// Request headers that count in the fingerprint.
    #[serde(default)]
    pub fingerprint_headers: Vec<String>,
    /// Whether the upstream honours the derived key on this route (default: `[upstream]`'s
    /// `deduplicates`): see [`UpstreamConfig::deduplicates`].
    pub upstream_deduplicates: Option<bool>,
}

/// Where the actor comes from: a digest of the client's credentials by default.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActorConfig {
    /// A header whose value is the credential (default `authorization`); the actor is its
    /// digest, never the value.
    pub header: Option<String>,
    /// A cookie whose value is the credential, digested like a header.
    pub cookie: Option<String>,
    /// A header set by a trusted gateway in front, naming the actor as is. Only safe if
    /// clients cannot reach the proxy without passing that gateway.
    pub trusted_header: Option<String>,
    /// Requests without credentials share one actor, `anonymous`, instead of 401. A request
    /// with any credential-like header (`Authorization`, `Proxy-Authorization`, `Cookie`
    /// and the `credential_headers` below) is not anonymous: its actor is
    /// a digest of those headers.
    #[serde(default)]
    pub anonymous: bool,
    /// Headers that carry a credential besides `Authorization`, `Proxy-Authorization` and
    /// `Cookie` (`x-api-key`, ...), so that requests with them never share the anonymous actor.
    #[serde(default)]
    pub credential_headers: Vec<String>,
    /// Also look for a record made under the plain SHA-256 digest of the credential, which
    /// proxies built before the keyed digest stored, so that a retry across that upgrade
    /// replays. Off by default: it costs every keyed request one more store read, and is
    /// needed only for a retention after upgrading a proxy that stored plain digests.
    #[serde(default)]
    pub earlier_digests: bool,
}

/// How the upstream is called.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// The longest the upstream may take to answer a request's head (default 30 s).
    pub timeout: Option<String>,
    /// The header carrying the record's derived key to the upstream (default
    /// `idempotency-derived-key`).
    pub derived_key_header: Option<String>,
    /// What a failure after the request was sent does: `store` (default) or `release`.
    pub unknown_outcome: Option<String>,
    /// Whether the upstream honours the derived key: a request it receives again under the
    /// same derived key is not executed again. Only then does a proxy that takes over the
    /// claim of a proxy that stopped (killed, frozen, its heartbeat lapsed) forward the
    /// request again; otherwise the takeover stores and answers 500
    /// `previous-attempt-unknown`, as the first forward may have reached the upstream.
    /// Default `false`; a route's `upstream_deduplicates` overrides it.
    #[serde(default)]
    pub deduplicates: bool,
}

fn default_methods() -> Vec<String> {
    vec!["POST".into(), "PATCH".into()]
}

fn default_path() -> String {
    "*".into()
}

impl ProxyConfig {
    /// Reads and checks the file; every error names the file.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
            path: path.to_owned(),
            source,
        })?;
        text.parse().map_err(|error| Error::Config {
            path: path.to_owned(),
            source: Box::new(error),
        })
    }

    /// Parses every value once, so that a bad one fails at start-up, not per request. The
    /// builder runs it too: a configuration made in code skips [`FromStr`].
    pub(crate) fn check(&self) -> Result<()> {
        self.routes()?;
        self.actor.credential_headers()?;
        self.upstream.timeout()?;
        self.derived_key_header()?;
        self.upstream.release_unknown()?;
        self.actor_caps()?;
        Ok(())
    }

    /// The per-actor caps the file sets; none where it sets none.
    pub fn actor_caps(&self) -> Result<idemkey_core::ActorCaps> {
        actor_caps(
            self.max_records_per_actor.as_ref(),
            self.max_bytes_per_actor.as_ref(),
        )
    }

    /// The routes, or the default one. A method and pattern covered twice is refused: first
    /// match wins, so the second route's settings would silently never apply.
    pub(crate) fn routes(&self) -> Result<Vec<Route>> {
        let deduplicates = self.upstream.deduplicates;
        if self.routes.is_empty() {
            return Ok(vec![Route::default_route(deduplicates)]);
        }
        let mut covered = HashSet::new();
        let mut routes = Vec::with_capacity(self.routes.len());
        for config in &self.routes {
            let route = config.parsed(deduplicates)?;
            for method in &route.methods {
                if !covered.insert((method.clone(), route.path.clone())) {
                    return Err(Error::DuplicateRoute {
                        method: method.clone(),
                        path: config.path.clone(),
                    });
                }
            }
            routes.push(route);
        }
        Ok(routes)
    }

    /// The header carrying the record's derived key to the upstream, which replaces any the
    /// client sent: so never the actor's credential or identity header either.
    pub(crate) fn derived_key_header(&self) -> Result<HeaderName> {
        let name = self.upstream.derived_key_header()?;
        match self.actor.source()? {
            ActorSource::Header(actor) | ActorSource::Trusted(actor) if actor == name => {
                Err(Error::DerivedKeyHeader(name.to_string()))
            }
            _ => Ok(name),
        }
    }
}

impl FromStr for ProxyConfig {
    type Err = Error;

    /// Parses and checks the text of a configuration file.
    fn from_str(text: &str) -> Result<Self> {
        let config: Self = toml::from_str(text)?;
        config.check()?;
        Ok(config)
    }
}

/// A route, parsed.
#[derive(Clone, Debug)]
pub(crate) struct Route {
    pub(crate) methods: Vec<Method>,
    pub(crate) path: PathPattern,
    pub(crate) require_key: bool,
    pub(crate) mismatch_status: Option<StatusCode>,
    pub(crate) wait_in_flight: Option<Duration>,
    pub(crate) fingerprint_headers: Vec<HeaderName>,
    /// Whether a takeover forwards again (the upstream honours the derived key) or stores
    /// `previous-attempt-unknown`.
    pub(crate) upstream_deduplicates: bool,
}

/// An exact path or a prefix.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum PathPattern {
    Exact(String),
    Prefix(String),
}

impl PathPattern {
    fn parse(pattern: &str) -> Result<Self> {
        if !pattern.starts_with('/') && pattern != "*" {
            return Err(Error::Path(pattern.to_owned()));
        }
        Ok(match pattern.strip_suffix('*') {
            Some(prefix) => Self::Prefix(prefix.to_owned()),
            None => Self::Exact(pattern.to_owned()),
        })
    }

    pub(crate) fn matches(&self, path: &str) -> bool {
        match self {
            Self::Exact(exact) => path == exact,
            Self::Prefix(prefix) => path.starts_with(prefix.as_str()),
        }
    }
}

impl Route {
    fn default_route(upstream_deduplicates: bool) -> Self {
        Self {
            methods: vec![Method::POST, Method::PATCH],
            path: PathPattern::Prefix(String::new()),
            require_key: false,
            mismatch_status: None,
            wait_in_flight: None,
            fingerprint_headers: Vec::new(),
            upstream_deduplicates,
        }
    }

    /// Whether a request with this method and path is this route's.
    pub(crate) fn matches(&self, method: &Method, path: &str) -> bool {
        self.methods.contains(method) && self.path.matches(path)
    }
}

impl RouteConfig {
    /// The route, where the upstream deduplicates unless it says otherwise if
    /// `deduplicates`.
    fn parsed(&self, deduplicates: bool) -> Result<Route> {
        let methods = self
            .methods
            .iter()
            .map(|m| Method::from_bytes(m.to_ascii_uppercase().as_bytes()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(Error::Method)?;
        if methods.is_empty() {
            return Err(Error::NoMethods(self.path.clone()));
        }
        let mismatch_status = self
            .mismatch_status
            .map(|status| {
                StatusCode::from_u16(status)
                    .ok()
                    .filter(|s| s.is_client_error())
                    .ok_or(Error::MismatchStatus(status))
            })
            .transpose()?;
        let wait_in_flight = self.wait_in_flight.as_deref().map(duration).transpose()?;
        let fingerprint_headers = self
            .fingerprint_headers
            .iter()
            .map(|name| header_name(name))
            .collect::<Result<Vec<_>>>()?;
        Ok(Route {
            methods,
            path: PathPattern::parse(&self.path)?,
            require_key: self.require_key,
            mismatch_status,
            wait_in_flight,
            fingerprint_headers,
            upstream_deduplicates: self.upstream_deduplicates.unwrap_or(deduplicates),
        })
    }
}

/// Where the credential of a request is read.
#[derive(Clone, Debug)]
pub(crate) enum ActorSource {
    /// A digest of this header's value.
    Header(HeaderName),
    /// A digest of this cookie's value.
    Cookie(String),
    /// This header's value as is (a trusted gateway sets it).
    Trusted(HeaderName),
}

/// The headers that always carry a credential.
const CREDENTIAL_HEADERS: [HeaderName; 3] = [
    header::AUTHORIZATION,
    header::PROXY_AUTHORIZATION,
    header::COOKIE,
];

impl ActorConfig {
    /// The credential-like headers: an anonymous request with any of them is not anonymous.
    pub(crate) fn credential_headers(&self) -> Result<Vec<HeaderName>> {
        let mut names = CREDENTIAL_HEADERS.to_vec();
        for name in &self.credential_headers {
            let name = header_name(name)?;
            if !names.contains(&name) {
                names.push(name);
            }
        }
        Ok(names)
    }

    /// The one source configured; several are an error.
    pub(crate) fn source(&self) -> Result<ActorSource> {
        match (&self.header, &self.cookie, &self.trusted_header) {
            (None, None, None) => Ok(ActorSource::Header(http::header::AUTHORIZATION)),
            (Some(header), None, None) => Ok(ActorSource::Header(header_name(header)?)),
            (None, Some(cookie), None) if !cookie.is_empty() => {
                Ok(ActorSource::Cookie(cookie.clone()))
            }
            (None, None, Some(header)) => Ok(ActorSource::Trusted(header_name(header)?)),
            _ => Err(Error::ActorSource),
        }
    }
}

impl UpstreamConfig {
    /// The longest the upstream may take to answer a request's head. Below a millisecond
    /// every request would time out, often before it was sent, and yet be stored as a 502
    /// whose outcome is unknown.
    pub(crate) fn timeout(&self) -> Result<Duration> {
        let Some(value) = self.timeout.as_deref() else {
            return Ok(Duration::from_secs(30));
        };
        let timeout = duration(value)?;
        if timeout < MIN_TIMEOUT {
            return Err(Error::Timeout(value.to_owned()));
        }
        Ok(timeout)
    }

    /// The header carrying the record's derived key to the upstream: not one whose value
    /// the upstream, or the connection to it, relies on.
    pub(crate) fn derived_key_header(&self) -> Result<HeaderName> {
        let given = self
            .derived_key_header
            .as_deref()
            .unwrap_or("idempotency-derived-key");
        let name = HeaderName::from_bytes(given.as_bytes())
            .map_err(|_| Error::DerivedKeyHeader(given.to_owned()))?;
        if RESERVED_HEADERS.contains(&name) {
            return Err(Error::DerivedKeyHeader(given.to_owned()));
        }
        Ok(name)
    }

    /// Whether an unknown outcome releases the claim (`release`) rather than storing the
    /// 502 (`store`, the default).
    pub(crate) fn release_unknown(&self) -> Result<bool> {
        match self.unknown_outcome.as_deref() {
            None | Some("store") => Ok(false),
            Some("release") => Ok(true),
            Some(other) => Err(Error::UnknownOutcome(other.to_owned())),
        }
    }
}

/// The shortest upstream timeout accepted.
const MIN_TIMEOUT: Duration = Duration::from_millis(1);

/// Headers the derived key must not replace: credentials, hop-by-hop and framing headers,
/// the forwarding headers the proxy sets, and the client's own key.
const RESERVED_HEADERS: [HeaderName; 20] = [
    header::AUTHORIZATION,
    header::PROXY_AUTHORIZATION,
    header::COOKIE,
    header::HOST,
    header::CONTENT_LENGTH,
    header::CONTENT_TYPE,
    header::CONTENT_ENCODING,
    header::TRANSFER_ENCODING,
    header::CONNECTION,
    header::TE,
    header::TRAILER,
    header::UPGRADE,
    header::EXPECT,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    HeaderName::from_static("forwarded"),
    HeaderName::from_static("x-forwarded-for"),
    HeaderName::from_static("x-forwarded-host"),
    HeaderName::from_static("x-forwarded-proto"),
    idemkey_tower::IDEMPOTENCY_KEY,
];

fn duration(value: &str) -> Result<Duration> {
    humantime::parse_duration(value).map_err(|source| Error::Duration {
        value: value.to_owned(),
        source,
    })
}

fn header_name(name: &str) -> Result<HeaderName> {
    HeaderName::from_bytes(name.as_bytes()).map_err(|source| Error::HeaderName {
        name: name.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ProxyConfig> {
        text.parse()
    }

    #[test]
    fn an_empty_file_covers_post_and_patch_everywhere() {
        let routes = parse("").unwrap().routes().unwrap();
        assert_eq!(routes.len(), 1);
        assert!(routes[0].matches(&Method::PATCH, "/any/path"));
        assert!(!routes[0].matches(&Method::PUT, "/any/path"));
        assert!(!routes[0].require_key);
    }

    /// An upstream is not taken to deduplicate unless the file says so, for every route or
    /// for one.
    #[test]
    fn takeovers_forward_again_only_where_the_upstream_deduplicates() {
        let routes = |text| parse(text).unwrap().routes().unwrap();
        assert!(!routes("")[0].upstream_deduplicates);
        assert!(routes("[upstream]\ndeduplicates = true")[0].upstream_deduplicates);
        let mixed = routes(concat!(
            "[[route]]\npath = \"/a\"\n",
            "[[route]]\npath = \"/b\"\nupstream_deduplicates = true\n",
        ));
        assert!(!mixed[0].upstream_deduplicates && mixed[1].upstream_deduplicates);
        let overridden = routes(concat!(
            "[[route]]\npath = \"/a\"\nupstream_deduplicates = false\n",
            "[upstream]\ndeduplicates = true\n",
        ));
        assert!(!overridden[0].upstream_deduplicates);
    }

    #[test]
    fn routes_parse_with_their_settings() {
        let config = parse(
            r#"
            [[route]]
            methods = ["post"]
            path = "/v1/payments*"
            require_key = true
            mismatch_status = 409
            wait_in_flight = "2s"
            fingerprint_headers = ["x-tenant"]
            [actor]
            trusted_header = "x-user"
            [upstream]
            timeout = "5s"
            unknown_outcome = "release"
            "#,
        )
        .unwrap();
        let route = &config.routes().unwrap()[0];
        assert!(route.matches(&Method::POST, "/v1/payments/7"));
        assert!(!route.matches(&Method::POST, "/v1/refunds"));
        assert_eq!(route.mismatch_status, Some(StatusCode::CONFLICT));
        assert_eq!(route.wait_in_flight, Some(Duration::from_secs(2)));
        assert!(matches!(
            config.actor.source().unwrap(),
            ActorSource::Trusted(_)
        ));
        assert!(config.upstream.release_unknown().unwrap());
    }

    #[test]
    fn bad_values_are_refused() {
        for bad in [
            "[[route]]\npath = \"v1\"",
            "[[route]]\nmismatch_status = 500",
            "[[route]]\nwait_in_flight = \"soon\"",
            "[[route]]\nmethods = [\"BAD METHOD\"]",
            "[actor]\nheader = \"a\"\ncookie = \"b\"",
            "[upstream]\nunknown_outcome = \"maybe\"",
            "[upstream]\nbogus = 1",
            "max_records_per_actor = 0",
            "max_records_per_actor = -3",
            "max_records_per_actor = \"many\"",
            "max_bytes_per_actor = \"64MB\"",
            "max_bytes_per_actor = 0",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    fn refusal(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    #[test]
    fn per_actor_caps_are_read_at_the_top_of_the_file() {
        let caps = parse("max_records_per_actor = 100\nmax_bytes_per_actor = \"1MiB\"\n[[route]]")
            .unwrap()
            .actor_caps()
            .unwrap();
        assert_eq!(
            caps,
            idemkey_core::ActorCaps::new()
                .max_records(100)
                .max_bytes(1 << 20)
        );
        let off = "max_records_per_actor = \"unlimited\"\nmax_bytes_per_actor = \"unlimited\"";
        assert!(parse(off).unwrap().actor_caps().unwrap().is_unlimited());
        assert!(parse("").unwrap().actor_caps().unwrap().is_unlimited());
        let message = refusal("max_bytes_per_actor = \"lots\"");
        assert!(message.contains("max_bytes_per_actor"), "{message}");
    }

    #[test]
    fn a_zero_timeout_is_refused_with_the_minimum() {
        for zero in ["0s", "0ms", "999us"] {
            let message = refusal(&format!("[upstream]\ntimeout = \"{zero}\""));
            assert!(
                message.contains("timeout") && message.contains("1ms"),
                "{message}"
            );
        }
        assert!(parse("[upstream]\ntimeout = \"1ms\"").is_ok());
    }

    #[test]
    fn a_derived_key_header_may_not_replace_a_request_header_that_matters() {
        for name in [
            "authorization",
            "Proxy-Authorization",
            "cookie",
            "host",
            "content-length",
            "transfer-encoding",
            "connection",
            "upgrade",
            "te",
            "idempotency-key",
            "forwarded",
            "X-Forwarded-Host",
            "not a header",
        ] {
            let message = refusal(&format!("[upstream]\nderived_key_header = \"{name}\""));
            assert!(message.contains("derived_key_header"), "{name}: {message}");
        }
        // The actor's own credential header is a credential too.
        let message = refusal(
            "[actor]\nheader = \"x-api-key\"\n[upstream]\nderived_key_header = \"X-Api-Key\"",
        );
        assert!(message.contains("derived_key_header"), "{message}");
        assert!(parse("[upstream]\nderived_key_header = \"x-derived\"").is_ok());
    }

    #[test]
    fn a_route_without_methods_is_refused() {
        let message = refusal("[[route]]\nmethods = []");
        assert!(message.contains("methods"), "{message}");
    }

    #[test]
    fn a_method_and_path_covered_twice_is_refused() {
        let message = refusal(
            "[[route]]\nmethods = [\"POST\"]\npath = \"/a\"\n\
             [[route]]\nmethods = [\"patch\", \"post\"]\npath = \"/a\"",
        );
        assert!(
            message.contains("POST") && message.contains("/a"),
            "{message}"
        );
        assert!(parse("[[route]]\nmethods = [\"POST\", \"post\"]").is_err());
        // Another pattern, even one that overlaps, is another route.
        assert!(
            parse("[[route]]\npath = \"/a\"\n[[route]]\npath = \"/a*\"\n[[route]]\npath = \"/b\"")
                .is_ok()
        );
    }
}
