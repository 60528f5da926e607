//! Lease mode, for any store and any service: the claim commits on its own with a lease, the
//! handler runs under it, and the response completes the record afterwards (behaviour [§5](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#5-decisions)-[§8a](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#8a-external-effects-lease-mode)).
//!
//! [`IdempotencyLayer`] applies [`Idempotency`] to a service; its future is the crate's
//! [`ResponseFuture`](crate::ResponseFuture), shared with atomic mode. A keyed request,
//! prepared as in both modes, takes these steps, one file each, and is answered as in both.
//! What the layer's requests share (`shared`) is handed to each step by the service:
//!
//! - `begin`: this process's turn at the scope, the lookup in the request's own task, then,
//!   in a task of its own, the claim (and the wait for an original in flight); `local` keeps
//!   the turns and the executions of this process, which answer their duplicates; `orphan`
//!   gives back a claim that failed but may stand;
//! - `execute`: the handler under the claim, its lease renewed by `heartbeat`, its owner (the
//!   process) kept alive by `liveness` if the layer has an owner grace;
//! - `settle`: the record completed, released or discarded, in the store or, with
//!   [`IdempotencyLayer::transactional`] (feature `sqlx` of idemkey-tower; `sqlite` or
//!   `postgres` of the `idemkey` facade), in the handler's transaction (`crate::tx`).

mod begin;
mod execute;
mod heartbeat;
mod layer;
mod liveness;
mod local;
mod orphan;
mod service;
mod settle;
mod shared;

pub use layer::IdempotencyLayer;
pub use liveness::OwnerHeartbeat;
pub use service::Idempotency;
// Lease mode's completion in the handler's transaction (`tx/lease.rs`) reads the state.
#[cfg(feature = "sqlx")]
pub(crate) use shared::Shared;
