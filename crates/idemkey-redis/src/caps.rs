//! Per-actor caps (behaviour [§11](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#11-security))
//! on Redis: each actor's records are entered in a ledger of their own (`lua/ledger.lua`),
//! checked before a claim, and each change of a record is followed there.
//!
//! A record and its actor's ledger live in different slots, so the ledger is a script of its
//! own beside the record's: one more round trip per new record, and one per completion,
//! release, extension or takeover. Its entries err on the side of the cap: an entry lives at
//! least as long as its record (a lost update leaves it until its own expiry, at most the
//! lease plus the retention after the claim), so an actor is never under-counted by more than
//! the updates lost after a completion.

use std::time::Duration;

use idemkey_core::{ActorCaps, ActorUsage, Error, Result, Scope};
use redis::aio::ConnectionLike;
use redis::{FromRedisValue, Value};

use crate::error::Sent;
use crate::scripts::scripts;
use crate::store::{RedisStore, ms};

/// How a record changed, for its actor's ledger (`lua/note.lua`).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Change {
    /// Completed: it lives `retention` from now, its stored response taking `bytes`.
    Stored { retention: Duration, bytes: u64 },
    /// Claimed again, extended or released: it lives at least `life` from now.
    Renewed { life: Duration },
    /// Discarded or forgotten.
    Gone,
}

impl<C> RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// The same store with per-actor caps on live records and stored bytes, none by default.
    /// A request that would create a new record for an actor at a cap is refused with
    /// [`Error::ActorCap`] (429) before its claim, so nothing is created; a retry answered
    /// from an existing record is never refused.
    ///
    /// Each actor's records are kept in a ledger of their own (a sorted set and a hash under
    /// the prefix, in the actor's slot), checked before each claim of a new key: one more
    /// script per new record and per completion. Concurrent requests of one actor are
    /// counted in the order Redis runs their checks, so the record cap holds exactly; near
    /// it, a request may be refused for a concurrent one that is refused too.
    #[must_use]
    pub fn with_actor_caps(mut self, caps: ActorCaps) -> Self {
        self.caps = caps;
        self
    }

    /// Enters the record of `scope` (Redis key `key`), about to be claimed, in its actor's
    /// ledger and checks the caps: `Err(Error::ActorCap)` takes the entry out again.
    pub(crate) async fn admit(&self, scope: &Scope, key: &str, life: Duration) -> Result<()> {
        if self.caps.is_unlimited() {
            return Ok(());
        }
        let mut invocation = scripts().admit.prepare_invoke();
        for ledger_key in self.keys.ledger(&scope.actor) {
            invocation.key(ledger_key);
        }
        invocation.arg(key).arg(ms(life));
        let reply = self.run(&invocation, Sent::Harmless).await?;
        let Some(usage) = usage(reply)? else {
            return Ok(());
        };
        let checked = self.caps.check(&usage, 0);
        if checked.is_err() {
            self.write_note(scope, key, Change::Gone).await;
        }
        checked
    }

    /// Follows a change of the record of `scope` in its actor's ledger, if the store has caps
    /// (the record's key is derived only then: without caps this costs nothing). A failure is
    /// logged: the record's own change is done, and the entry errs on the side of the cap
    /// until its own expiry.
    pub(crate) async fn note(&self, scope: &Scope, change: Change) {
        if !self.caps.is_unlimited() {
            self.write_note(scope, &self.keys.record(scope), change)
                .await;
        }
    }

    /// Takes a forgotten record out of its actor's ledger, caps or not: a forget by a tool
    /// without caps (`idemkey forget`) makes room all the same.
    pub(crate) async fn forget_entry(&self, scope: &Scope, key: &str) {
        self.write_note(scope, key, Change::Gone).await;
    }

    async fn write_note(&self, scope: &Scope, key: &str, change: Change) {
        let mut invocation = scripts().note.prepare_invoke();
        for ledger_key in self.keys.ledger(&scope.actor) {
            invocation.key(ledger_key);
        }
        invocation.arg(key);
        match change {
            Change::Stored { retention, bytes } => {
                invocation.arg("stored").arg(ms(retention)).arg(bytes)
            }
            Change::Renewed { life } => invocation.arg("renewed").arg(ms(life)),
            Change::Gone => invocation.arg("gone").arg(0),
        };
        if let Err(error) = self.run(&invocation, Sent::Harmless).await {
            tracing::warn!(%error, "an actor's ledger was not updated");
        }
    }
}

/// `admit.lua`'s reply: `None` for an entry already there, else the actor's usage with it.
fn usage(reply: Value) -> Result<Option<ActorUsage>> {
    let parts = Vec::<i64>::from_redis_value(reply)
        .map_err(|e| Error::Backend(format!("unexpected reply from Redis: {e}").into()))?;
    let count = |n: i64| u64::try_from(n).unwrap_or(0);
    match parts.as_slice() {
        [1] => Ok(None),
        [2, records, bytes, wait] => Ok(Some(ActorUsage {
            records: count(*records),
            bytes: count(*bytes),
            next_expiry: Duration::from_millis(count(*wait)),
        })),
        _ => Err(Error::Backend(
            format!("unexpected reply from Redis to an actor's check: {parts:?}").into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn an_entry_already_there_needs_no_check() {
        assert_eq!(usage(Value::Array(vec![Value::Int(1)])).unwrap(), None);
        let reply = Value::Array([2, 3, 300, 1500].map(Value::Int).to_vec());
        let usage = usage(reply).unwrap().unwrap();
        assert_eq!((usage.records, usage.bytes), (3, 300));
        assert_eq!(usage.next_expiry, Duration::from_millis(1500));
        assert!(super::usage(Value::Array(vec![Value::Int(7)])).is_err());
    }
}
