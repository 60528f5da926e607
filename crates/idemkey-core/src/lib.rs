//! Idempotency keys for HTTP APIs: the protocol, independent of any web framework or database.
//!
//! A retry that carries the same `Idempotency-Key` as its original is tied to it: the key is
//! scoped to (actor, operation, key), every request is fingerprinted, the first result is
//! stored and replayed, a key reused for a different request is rejected, and concurrent
//! duplicates produce exactly one execution.
//!
//! This crate holds the parts every backend and integration shares: [`Key`] parsing,
//! [`Scope`] and [`Operation`], the [`Fingerprint`], the [`Record`] state machine, the
//! [`Store`] trait with [`begin`] driving the decision table, [`MemoryStore`], [`Turns`] (the
//! per-scope turns that coalesce a process's duplicates), derived keys for external effects,
//! and problem details.
//!
//! ```
//! use idemkey_core::{begin, Begin, ClaimRequest, ExpiredLease, Fingerprint, Key, MemoryStore,
//!     Operation, Store, StoredResponse};
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let store = MemoryStore::new();
//! let key: Key = "order-42".parse()?;
//! let fingerprint = Fingerprint::builder("POST", "/v1/notes")
//!     .content_type("application/json")
//!     .body(br#"{"title": "hello"}"#);
//! let request = ClaimRequest::new("actor-a", Operation::new("create-note", "v1"), key, fingerprint);
//!
//! // The first request claims the scope, runs, and stores its response.
//! let Begin::Execute(claim) = begin(&store, &request, ExpiredLease::TakeOver).await? else {
//!     unreachable!()
//! };
//! store.complete(&claim, &StoredResponse::new(201, r#"{"id":"n1"}"#)).await?;
//!
//! // A retry replays it.
//! let Begin::Replay(response) = begin(&store, &request, ExpiredLease::TakeOver).await? else {
//!     unreachable!()
//! };
//! assert_eq!(response.status, 201);
//! # Ok::<_, Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```
//!
//! | feature | what it enables |
//! | --- | --- |
//! | `testkit` | [`store_conformance_suite!`]: the cases every store must pass |
//! | `replay-cache` | `ReplayCache`: the memory of the stores' replay caches |

#![cfg_attr(docsrs, feature(doc_cfg))]
mod caps;
mod derive;
mod error;
pub mod fingerprint;
mod key;
mod memory;
mod policy;
pub mod problem;
mod protocol;
mod record;
#[cfg(feature = "replay-cache")]
#[cfg_attr(docsrs, doc(cfg(feature = "replay-cache")))]
mod replay_cache;
mod response;
mod scope;
mod store;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
mod turns;

pub use caps::{ActorCaps, ActorUsage, Cap};
pub use derive::{DerivedKeys, SECRET_LEN};
pub use error::{BoxError, Error, Result};
pub use fingerprint::Fingerprint;
pub use key::{Key, KeyError, MAX_KEY_LEN};
pub use memory::{Clock, ManualClock, MemoryStore, SystemClock};
pub use policy::{ExpiredLease, REJECTION_STATUSES, StatusPolicy, Verdict};
pub use problem::{Problem, ProblemKind};
pub use protocol::{
    Answer, Begin, ClaimWrites, Decision, begin, claim, claim_by, decide, lookup,
    previous_attempt_unknown, retry_after,
};
pub use record::{
    Claim, ClaimFlush, ClaimRequest, DEFAULT_LEASE, DEFAULT_RETENTION, MAX_REQUEST_ID_LEN, OwnerId,
    Record, RecordId, RecordState,
};
#[cfg(feature = "replay-cache")]
pub use replay_cache::{CacheKey, ReplayCache};
pub use response::{DecodeError, StoredResponse};
pub use scope::{Operation, Scope};
pub use store::{ActorForgotten, Store, TryClaim};
pub use turns::{Follower, Identity, OwnTurn, Turn, Turns};
