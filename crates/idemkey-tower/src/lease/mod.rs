//! Lease mode, for any store and any service: the claim commits on its own with a lease, the
//! handler runs under it, and the response completes the record afterwards (behaviour §5-§8a).
//!
//! [`IdempotencyLayer`] applies [`Idempotency`] to a service; its [`ResponseFuture`] is the
//! service's future. A keyed request, prepared (`crate::prepare`), takes these steps, one file
//! each, and is answered by `crate::answer`:
//!
//! - `begin`: this process's turn at the scope, the lookup in the request's own task, then,
//!   in a task of its own, the claim (and the wait for an original in flight); `local` keeps
//!   the turns and the executions of this process, which answer their duplicates;
//! - `execute`: the handler under the claim, its lease renewed by `heartbeat`;
//! - `settle`: the record completed, released or discarded, in the store or, with
//!   [`IdempotencyLayer::transactional`] (feature `sqlx`), in the handler's transaction
//!   (`transactions`, `transactional`).

mod begin;
mod execute;
mod future;
mod heartbeat;
mod layer;
mod local;
mod service;
mod settle;
#[cfg(feature = "sqlx")]
mod transactional;
mod transactions;

pub use future::ResponseFuture;
pub use layer::IdempotencyLayer;
pub use service::Idempotency;
