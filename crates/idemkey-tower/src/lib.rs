//! Idempotency-Key middleware for tower and axum: [`IdempotencyLayer`], in lease mode.
//!
//! ```
//! use axum::{Router, body::Body, extract::Request, middleware, routing::post};
//! use http::StatusCode;
//! use idemkey_core::MemoryStore;
//! use idemkey_tower::{Actor, Config, IdempotencyLayer};
//! use tower::ServiceExt;
//!
//! async fn create_note() -> (StatusCode, &'static str) {
//!     (StatusCode::CREATED, r#"{"id":"n1"}"#)
//! }
//!
//! // Stands in for real authentication, which runs outside the idempotency layer.
//! async fn authenticate(mut request: Request) -> Request {
//!     request.extensions_mut().insert(Actor::new("tenant-1"));
//!     request
//! }
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let config = Config::default().secret(b"load me from the environment".as_slice());
//! let app = Router::new()
//!     .route("/v1/notes", post(create_note))
//!     .layer(IdempotencyLayer::with_config(MemoryStore::new(), config))
//!     .layer(middleware::map_request(authenticate));
//!
//! let request = || {
//!     Request::post("/v1/notes")
//!         .header("idempotency-key", "order-42")
//!         .body(Body::from(r#"{"title":"hello"}"#))
//!         .unwrap()
//! };
//! let first = app.clone().oneshot(request()).await?;
//! assert_eq!(first.status(), StatusCode::CREATED);
//!
//! let retry = app.oneshot(request()).await?;
//! assert_eq!(retry.status(), StatusCode::CREATED);
//! assert_eq!(retry.headers()["idempotent-replayed"], "true");
//! # Ok::<_, Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```
//!
//! What the layer does, per request (behaviour [§2](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#2-the-key)-[§7](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#7-replay), [§10](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#10-errors)):
//!
//! - On the [`Config::methods`] (POST and PATCH by default) it parses the `Idempotency-Key`
//!   header; other methods, and requests axum routed to no route (its fallback), pass
//!   through untouched. A missing key is `key-missing` (or, with
//!   [`Config::require_key`] off, the request runs unrecorded); a malformed one `key-invalid`.
//! - The scope is the [`Actor`] that authentication put in the request extensions (401
//!   without one), the operation named by [`MakeOperation`], and the key.
//! - The body is read up to [`Config::request_body_limit`] (413 beyond), and fingerprinted.
//! - The store decides: replay the stored response (`Idempotent-Replayed: true`), reject a
//!   different request (`key-reused`, 422), answer a running duplicate (`request-in-flight`,
//!   409, or wait for it), or claim and execute.
//! - The claiming request runs the inner service in a task of its own, with [`Keys`] (its
//!   [`DerivedKeys`](idemkey_core::DerivedKeys), handed out once the claim is on disk) and
//!   the [`Claim`](idemkey_core::Claim) in its extensions, renewing the lease meanwhile; the response is then stored, released or
//!   rejected by the [`ResponsePolicy`] (by default
//!   [`StatusPolicy::Default`](idemkey_core::StatusPolicy::Default): the statuses that reject
//!   a request as sent are not stored and free the key). A handler can mark one response
//!   with a [`Verdict`](idemkey_core::Verdict) or [`NotExecuted`].
//! - Derived keys use the store's own secret
//!   ([`Store::secret`](idemkey_core::Store::secret)) unless [`Config::secret`] sets one: the
//!   same for every instance and restart.
//! - Store failures before execution are `store-unavailable` (503): the request did not run.
//!
//! The building blocks of both modes are public for reuse: [`prepare`] (key, actor, body,
//! fingerprint), [`split_response`], [`replay_response`] and [`problem_response`].
//!
//! Each mode has a module of its own, with its layer, service and steps: [`lease`] (re-exported
//! here) and [`atomic`]. Both prepare a request the same way and answer with the same
//! responses and problems.
//!
//! | feature | what it enables |
//! | --- | --- |
//! | `axum` (default) | axum's body as [`Body`]; the matched route names the operation, axum's fallback passes through. Without it the layer serves any tower service over `http` bodies, and axum is not a dependency |
//! | `sqlx` | [`atomic`]: atomic mode on idemkey-sqlx's stores, with the `Tx` extractor (implies `axum`) |
//! | `openapi` | [`openapi`]: the covered routes documented in a utoipa OpenAPI document |

#![cfg_attr(docsrs, feature(doc_cfg))]
mod actor;
mod answer;
#[cfg(feature = "sqlx")]
pub mod atomic;
mod body;
mod config;
mod executions;
mod extensions;
mod future;
mod keys;
pub mod lease;
mod misconfig;
mod observe;
#[cfg(feature = "openapi")]
pub mod openapi;
mod operation;
mod policy;
mod prepare;
mod replay;
mod select;
mod sweeper;
mod tx;

pub use actor::{ActorExtension, MakeActor};
pub use answer::store_unavailable;
pub use body::Body;
pub use config::Config;
pub use executions::Executions;
pub use extensions::{Actor, NotExecuted};
pub use future::ResponseFuture;
pub use keys::Keys;
pub use lease::{Idempotency, IdempotencyLayer, OwnerHeartbeat};
pub use operation::{DefaultOperation, MakeOperation, RouteTemplate};
pub use policy::ResponsePolicy;
pub use prepare::{Preparation, Prepared, Rejection, fingerprint, prepare};
pub use replay::{
    IDEMPOTENCY_KEY, IDEMPOTENT_BODY_OMITTED, IDEMPOTENT_REPLAYED, is_stored_header,
    problem_response, replay_response, split_response, stored_headers,
};
pub use select::JsonSelection;
pub use sweeper::{SWEEP_BATCH, Sweeper, sweep_all};
