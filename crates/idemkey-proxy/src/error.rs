//! The proxy's one error type: a bad configuration or upstream, found at start-up, never per
//! request. Each message names the value at fault and leaves the cause to
//! [`std::error::Error::source`].

use std::path::PathBuf;

/// What can be wrong with the proxy's configuration.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration file could not be read.
    #[error("cannot read {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The configuration file is not valid: its cause says where.
    #[error("invalid config {}", path.display())]
    Config {
        /// The file.
        path: PathBuf,
        /// What is wrong in it.
        #[source]
        source: Box<Error>,
    },
    /// The file is not TOML of the expected shape.
    #[error(transparent)]
    Toml(#[from] toml::de::Error),
    /// A route's method is not an HTTP method.
    #[error("invalid method")]
    Method(#[source] http::method::InvalidMethod),
    /// A route's `mismatch_status` is not a 4xx status.
    #[error("mismatch_status must be a 4xx status: {0}")]
    MismatchStatus(u16),
    /// A duration is not one (`2s`, `1500ms`).
    #[error("invalid duration {value:?}")]
    Duration {
        /// The value given.
        value: String,
        /// Why it is not a duration.
        #[source]
        source: humantime::DurationError,
    },
    /// A header name is not one.
    #[error("invalid header name {name:?}")]
    HeaderName {
        /// The name given.
        name: String,
        /// Why it is not a header name.
        #[source]
        source: http::header::InvalidHeaderName,
    },
    /// A route's path is neither absolute nor `*`.
    #[error("a route's path must start with '/' or be '*': {0:?}")]
    Path(String),
    /// The `[actor]` table names no source, or several.
    #[error("[actor]: set one of header, cookie (non-empty) or trusted_header")]
    ActorSource,
    /// `unknown_outcome` is neither `store` nor `release`.
    #[error("unknown_outcome must be \"store\" or \"release\": {0:?}")]
    UnknownOutcome(String),
    /// The upstream URL does not parse.
    #[error("invalid --upstream {url:?}")]
    UpstreamUrl {
        /// The URL given.
        url: String,
        /// Why it does not parse.
        #[source]
        source: http::uri::InvalidUri,
    },
    /// The upstream URL is not `http://`.
    #[error("--upstream must be an http:// URL: {0:?}")]
    UpstreamScheme(String),
    /// The upstream URL has a query.
    #[error("--upstream must not have a query: {0:?}")]
    UpstreamQuery(String),
    /// The upstream URL has no host.
    #[error("--upstream has no host: {0:?}")]
    UpstreamHost(String),
    /// The upstream URL carries credentials (`user:password@`), which the proxy would drop
    /// and print. The URL is shown with its password masked.
    #[error("--upstream must not carry credentials (user:password@): {0:?}")]
    UpstreamUserinfo(String),
    /// The upstream's `timeout` is below the minimum.
    #[error("[upstream] timeout must be at least 1ms: {0:?}")]
    Timeout(String),
    /// The upstream's `derived_key_header` would replace a header the upstream relies on.
    #[error(
        "[upstream] derived_key_header must not be a credential, hop-by-hop, framing, \
         forwarding or idempotency header: {0:?}"
    )]
    DerivedKeyHeader(String),
    /// A route lists no method.
    #[error("a route's methods must not be empty (path {0:?})")]
    NoMethods(String),
    /// A method and path pattern are covered twice: the second route would never match.
    #[error("{method} {path:?} is covered by two routes (or listed twice)")]
    DuplicateRoute {
        /// The method.
        method: http::Method,
        /// The path pattern, as written.
        path: String,
    },
    /// A per-actor cap is neither a whole number of at least 1 (for bytes, also a size such
    /// as `64MiB`) nor `unlimited`.
    #[error(
        "{key} must be a whole number of at least 1 (bytes also 500KiB, 64MiB, 1GiB) or \"unlimited\": {value:?}"
    )]
    ActorCap {
        /// The setting.
        key: &'static str,
        /// The value given.
        value: String,
    },
    /// Per-actor caps are set, and the store cannot hold actors to them.
    #[error(
        "this store cannot hold actors to per-actor caps: set max_records_per_actor and max_bytes_per_actor to \"unlimited\", or use a store that can"
    )]
    CapsUnsupported,
    /// A credential line is not `HEADER: VALUE`. The value is never part of the message.
    #[error("invalid credential: expected 'HEADER: VALUE' (the value is not shown)")]
    CredentialLine,
    /// A credential is not one the proxy reads, under its `[actor]` settings.
    #[error(
        "not a credential the proxy reads (the Authorization header unless its config says otherwise under [actor])"
    )]
    CredentialUnread,
    /// The store's secret, behind the actors' digests, could not be read.
    #[error("cannot read the store's secret")]
    StoreSecret(#[source] idemkey_core::Error),
}

/// A result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
