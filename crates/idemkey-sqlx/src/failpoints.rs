//! Test-only pause and fault points: with the `failpoints` feature, a hook the store awaits
//! at each step, which may block (to force a race) or fail (to inject a fault). Without the
//! feature the points cost nothing.

/// A step of a request at which the hook runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Point {
    /// Atomic mode: before an execution's read-only lookup (no other request of this process
    /// had the scope's turn, or this one would wait for it instead).
    BeforeLookup,
    /// Atomic mode: after the read-only lookup found no record, before the write transaction.
    AfterLookup,
    /// Atomic mode: a duplicate of a request this process is already on, before it waits
    /// for that request's answer (it neither looks up nor claims meanwhile).
    Follow,
    /// Before the claim statement: inside atomic mode's transaction, before its first
    /// statement (commit-time: before the handler, whose record is inserted last), or (lease mode,
    /// [`idemkey_core::Store::try_claim`]) before taking the connection the claim, a
    /// statement that commits on its own, runs on.
    BeforeClaim,
    /// Before the response is stored in the record: in atomic mode's transaction, in the
    /// caller's transaction ([`crate::SqlxStore::complete_in`]), or (lease mode,
    /// [`idemkey_core::Store::complete`]) on the pooled connection that will store it.
    BeforeComplete,
    /// Before `COMMIT`, after the record is completed: atomic mode (commit-time: inserted;
    /// on SQLite without caps, before the one command that inserts it and commits) and
    /// [`crate::SqlxStore::complete_in`].
    BeforeCommit,
    /// Lease mode: before a claim is given back ([`idemkey_core::Store::release`] or
    /// [`idemkey_core::Store::discard`]), on the pooled connection that will do it.
    BeforeRelease,
}

#[cfg(feature = "failpoints")]
pub use hook::*;

#[cfg(feature = "failpoints")]
mod hook {
    use std::fmt;
    use std::sync::Arc;

    use futures_util::future::BoxFuture;
    use idemkey_core::{Error, Result};

    use super::Point;

    /// The hook: awaited at every [`Point`]; an error aborts the step with that error.
    pub type Hook = Arc<dyn Fn(Point) -> BoxFuture<'static, Result<()>> + Send + Sync>;

    /// The hook a store carries, if any.
    #[derive(Clone, Default)]
    pub(crate) struct Failpoints(Option<Hook>);

    impl Failpoints {
        pub(crate) fn new(hook: Hook) -> Self {
            Self(Some(hook))
        }

        pub(crate) async fn hit(&self, point: Point) -> Result<()> {
            match &self.0 {
                Some(hook) => hook(point).await,
                None => Ok(()),
            }
        }
    }

    impl fmt::Debug for Failpoints {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(if self.0.is_some() {
                "Failpoints(hook)"
            } else {
                "Failpoints(none)"
            })
        }
    }

    /// An injected fault, for hooks that fail a step: the store unavailable at that point,
    /// as a lost connection or a lock wait that ran out would make it.
    pub fn injected(point: Point) -> Error {
        Error::Unavailable(format!("injected fault at {point:?}").into())
    }
}
