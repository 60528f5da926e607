//! Idempotency keys in front of any HTTP API, in any language, without changing its code:
//! a reverse proxy in lease mode (behaviour [§14](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#14-the-proxy)), the library behind `idemkey proxy`.
//!
//! The proxy is composed from the same parts as any service using idemkey, never a second
//! protocol: each covered route is an [`IdempotencyLayer`](idemkey_tower::IdempotencyLayer)
//! of its own settings over one [`Store`](idemkey_core::Store), in front of a forwarding
//! client. The actor is a digest of the credential the client sent (or a name a trusted
//! gateway set), hop-by-hop headers never cross the proxy nor reach a record, and a failure
//! after the request was sent is an unknown outcome, stored so a retry never executes twice
//! silently.
//!
//! [`Proxy::builder`] takes the [`Upstream`] and the store; [`ProxyConfig`] is the TOML
//! file of covered routes, actor source and upstream settings. The [`Proxy`] gives a tower
//! service ([`Proxy::service`]), serves a listener ([`Proxy::serve`]) and the admin routes
//! ([`Proxy::admin`]).
//!
//! ```no_run
//! use idemkey_core::MemoryStore;
//! use idemkey_proxy::{Limits, Proxy, ProxyConfig, Upstream};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let config: ProxyConfig = r#"
//!     [[route]]
//!     methods = ["POST"]
//!     path = "/v1/payments*"
//!     require_key = true
//! "#
//! .parse()?;
//! let upstream = Upstream::parse("http://127.0.0.1:3000")?;
//! let proxy = Proxy::builder(upstream, MemoryStore::new())
//!     .config(config)
//!     .build()?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! proxy
//!     .serve(listener, Limits::default(), idemkey_server::shutdown())
//!     .await;
//! # Ok(())
//! # }
//! ```

mod actor;
mod builder;
mod caps;
mod config;
mod credential;
mod earlier;
mod error;
mod forward;
mod headers;
mod host;
mod inbound;
mod path;
mod routes;
mod server;
mod upstream;

pub use actor::request_actors;
pub use builder::ProxyBuilder;
pub use caps::CapValue;
pub use config::{ActorConfig, ProxyConfig, RouteConfig, UpstreamConfig};
pub use credential::Credential;
pub use error::{Error, Result};
pub use forward::PROBLEM_SLUGS;
pub use idemkey_server::Limits;
pub use routes::ProxyService;
pub use server::Proxy;
pub use upstream::Upstream;
