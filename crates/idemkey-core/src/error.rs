//! The one error type of idemkey's stores.

/// A boxed error from a store's backend.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What can go wrong talking to a store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The claim is no longer held: a newer owner took over, or the record is gone.
    #[error("the claim is no longer held: a newer owner took over or the record is gone")]
    Fenced,
    /// The store could not be reached in time (busy timeout, pool timeout, lock timeout).
    /// Before execution this means the request was not executed: `store-unavailable`.
    #[error("the store is unavailable: {0}")]
    Unavailable(#[source] BoxError),
    /// The reply to a commit was lost: it may or may not have committed.
    #[error("the outcome of the commit is unknown: {0}")]
    OutcomeUnknown(#[source] BoxError),
    /// The scope's record kept changing under us; the request was not executed.
    #[error("the record changed too often while being claimed")]
    Contention,
    /// The actor reached one of its [`crate::ActorCaps`]: the request would create a new
    /// record, and was neither executed nor stored (429 `actor-cap-reached`).
    #[error("the actor reached its cap on {cap}")]
    ActorCap {
        /// The cap it met.
        cap: crate::Cap,
        /// When the first of the actor's records expires, making room.
        retry_after: std::time::Duration,
    },
    /// A stored response could not be decoded.
    #[error(transparent)]
    Corrupt(#[from] crate::response::DecodeError),
    /// Any other backend failure.
    #[error("store error: {0}")]
    Backend(#[source] BoxError),
}

/// `Result` with idemkey's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
