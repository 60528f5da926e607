//! The derived keys of a lease-mode execution, handed out once its claim is on disk
//! (behaviour [§8a](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#8a-external-effects-lease-mode)).
//!
//! The layer claims with [`ClaimFlush::Deferred`](idemkey_core::ClaimFlush::Deferred): a
//! claim lost in a power cut costs a duplicate only if an effect outside the store's
//! database was made under its derived keys (the retry's fresh claim gets a new record id,
//! so new keys). So the claim's flush waits for the first [`Keys::get`]: a handler that
//! never asks for keys, such as one whose effects commit with the record in its
//! transaction, pays no flush of its claim at all; one that does shares the flush with
//! every claim of the moment (SQLite's group commit).

use std::fmt;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use idemkey_core::{DerivedKeys, Error};
use tokio::sync::OnceCell;

/// Makes the execution's claim durable.
type FlushClaim = Box<dyn Fn() -> BoxFuture<'static, Result<(), Error>> + Send + Sync>;

/// Where a lease-mode handler takes its [`DerivedKeys`] from: put in the extensions of every
/// request the layer records, in place of the keys themselves.
///
/// [`Keys::get`] returns the keys once the claim is on disk, which the first call waits for.
/// With axum, take it as an extractor (`Option<Keys>` on a route where the key is optional):
///
/// ```no_run
/// use idemkey_tower::Keys;
///
/// async fn charge(keys: Keys) -> Result<String, idemkey_core::Error> {
///     let keys = keys.get().await?;
///     // Pass it to the provider's own idempotency mechanism.
///     Ok(keys.key("charge"))
/// }
/// ```
#[derive(Clone)]
pub struct Keys(Arc<Inner>);

struct Inner {
    keys: DerivedKeys,
    flush: FlushClaim,
    flushed: OnceCell<()>,
}

impl Keys {
    /// The keys of one execution, whose claim `flush` makes durable.
    pub(crate) fn new(keys: DerivedKeys, flush: FlushClaim) -> Self {
        Self(Arc::new(Inner {
            keys,
            flush,
            flushed: OnceCell::new(),
        }))
    }

    /// The derived keys, once the claim is on disk: the first call waits for the store's
    /// flush (shared with the other claims of the moment), later ones return at once. A
    /// failed flush is an error, and the next call tries again: no key has left the process.
    pub async fn get(&self) -> Result<DerivedKeys, Error> {
        self.0.flushed.get_or_try_init(|| (self.0.flush)()).await?;
        Ok(self.0.keys.clone())
    }

    /// The keys in `extensions`, if the layer recorded the request.
    pub fn from_extensions(extensions: &http::Extensions) -> Option<Self> {
        extensions.get::<Self>().cloned()
    }
}

impl fmt::Debug for Keys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keys")
            .field("record_id", &self.0.keys.record_id())
            .field("flushed", &self.0.flushed.initialized())
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "axum")]
mod extract {
    use axum::extract::{FromRequestParts, OptionalFromRequestParts};
    use axum::http::request::Parts;
    use axum::response::{IntoResponse, Response};
    use idemkey_core::{Problem, ProblemKind};

    use super::Keys;
    use crate::problem_response;

    /// The layer's keys; a 500 `handler-failed` on a request it did not record (take
    /// `Option<Keys>` where the key is optional).
    impl<S: Sync> FromRequestParts<S> for Keys {
        type Rejection = Response;

        async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Response> {
            Self::from_extensions(&parts.extensions).ok_or_else(not_recorded)
        }
    }

    /// The layer's keys, or `None` on a request it did not record (no key).
    impl<S: Sync> OptionalFromRequestParts<S> for Keys {
        type Rejection = std::convert::Infallible;

        async fn from_request_parts(
            parts: &mut Parts,
            _: &S,
        ) -> Result<Option<Self>, Self::Rejection> {
            Ok(Self::from_extensions(&parts.extensions))
        }
    }

    fn not_recorded() -> Response {
        let problem = Problem::new(ProblemKind::HandlerFailed).detail(
            "the handler takes Keys, but no idempotency layer in lease mode recorded this \
             request: take Option<Keys> where the key is optional",
        );
        problem_response(&problem).into_response()
    }
}
