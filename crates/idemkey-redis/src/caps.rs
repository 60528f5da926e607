//! Per-actor caps (behaviour [§11](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#11-security))
//! on Redis: each actor's records are entered in a ledger of their own (`lua/ledger.lua`),
//! checked in the script that creates a record, and each change of a record is followed there.
//!
//! On a standalone server the record's own scripts keep the ledger (its keys are passed beside
//! the record's): a keyed create is the claim and the completion, caps or not. In a cluster a
//! record and its actor's ledger live in different slots, which no script may cross, so the
//! ledger is a script of its own beside the record's: one more round trip before each claim
//! of a new key (`lua/admit.lua`), and one after each completion, release, extension, takeover
//! or discard (`lua/note.lua`). Its entries err on the side of the cap: an entry lives at
//! least as long as its record (in a cluster a lost update leaves it until its own expiry, at
//! most the lease plus the retention after the claim), so an actor is never under-counted by
//! more than the updates lost after a completion.

use std::time::Duration;

use idemkey_core::{ActorCaps, ActorUsage, Error, Result, Scope};
use redis::aio::ConnectionLike;
use redis::{FromRedisValue, ScriptInvocation, Value};

use crate::error::Sent;
use crate::scripts::scripts;
use crate::store::{RedisStore, ms};

/// The largest cap a script takes: Lua numbers are doubles, exact up to 2^53, and no actor
/// keeps that many records or bytes, so a larger cap is no cap.
const LUA_MAX: u64 = 1 << 53;

/// How a record changed, for its actor's ledger in a cluster (`lua/note.lua`).
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
    /// [`Error::ActorCap`] (429) by the script that would create it, so nothing is created; a
    /// retry answered from an existing record is never refused.
    ///
    /// Each actor's records are kept in a ledger of their own (a sorted set and a hash under
    /// the prefix, in the actor's slot), checked and entered in one script, so concurrent
    /// requests of one actor are counted one at a time and the record cap holds exactly. On a
    /// standalone server ([`Self::connect`]) the claim and completion scripts keep it: no
    /// script more per request. In a cluster, or on a connection given to [`Self::new`], the
    /// ledger is one more script per new record and per completion.
    #[must_use]
    pub fn with_actor_caps(mut self, caps: ActorCaps) -> Self {
        self.caps = caps;
        self.cap_args = cap_args(&caps);
        self
    }

    /// Whether the record's scripts keep its actor's ledger themselves: under caps, with every
    /// key on one server.
    fn ledger_in_scripts(&self) -> bool {
        self.one_server && !self.caps.is_unlimited()
    }

    /// Names the actor's ledger as `KEYS[2]` and `KEYS[3]` of a record's script, when the
    /// record's scripts keep it (`always`: caps or not, for a forget).
    pub(crate) fn name_ledger(
        &self,
        invocation: &mut ScriptInvocation<'_>,
        actor: &str,
        always: bool,
    ) {
        if self.ledger_in_scripts() || (always && self.one_server) {
            for ledger_key in self.keys.ledger(actor) {
                invocation.key(ledger_key);
            }
        }
    }

    /// Names the actor's ledger and passes the caps to a claim, when the claim keeps the
    /// ledger (`lua/claim.lua`'s `ARGV[13]`, `ARGV[14]`).
    pub(crate) fn claim_ledger(&self, invocation: &mut ScriptInvocation<'_>, actor: &str) {
        if self.ledger_in_scripts() {
            self.name_ledger(invocation, actor, false);
            invocation.arg(&self.cap_args[0]).arg(&self.cap_args[1]);
        }
    }

    /// In a cluster under caps: enters the record of `scope` (Redis key `key`), about to be
    /// claimed, in its actor's ledger if the caps let it in, else `Err(Error::ActorCap)`
    /// having entered nothing. Elsewhere the claim does it.
    pub(crate) async fn admit(&self, scope: &Scope, key: &str, life: Duration) -> Result<()> {
        if self.caps.is_unlimited() || self.one_server {
            return Ok(());
        }
        let mut invocation = scripts().admit.prepare_invoke();
        for ledger_key in self.keys.ledger(&scope.actor) {
            invocation.key(ledger_key);
        }
        invocation
            .arg(key)
            .arg(ms(life))
            .arg(&self.cap_args[0])
            .arg(&self.cap_args[1]);
        match admitted(self.run(&invocation, Sent::Harmless).await?)? {
            None => Ok(()),
            Some(usage) => Err(self.refusal(&usage)),
        }
    }

    /// The error for a request a script refused at `usage`: `ActorCaps::check`'s own.
    pub(crate) fn refusal(&self, usage: &ActorUsage) -> Error {
        match self.caps.check(usage, 0) {
            Err(refused) => refused,
            Ok(()) => Error::Backend(
                format!("Redis refused a record under caps that admit it: {usage:?}").into(),
            ),
        }
    }

    /// In a cluster under caps: follows a change of the record of `scope` in its actor's
    /// ledger (elsewhere the record's script did, or there are no caps, and this costs
    /// nothing). A failure is logged: the record's own change is done, and the entry errs on
    /// the side of the cap until its own expiry.
    pub(crate) async fn note(&self, scope: &Scope, change: Change) {
        if !self.caps.is_unlimited() && !self.one_server {
            self.write_note(scope, &self.keys.record(scope), change)
                .await;
        }
    }

    /// In a cluster: takes a forgotten record out of its actor's ledger, caps or not: a forget
    /// by a tool without caps (`idemkey forget`) makes room all the same. On one server the
    /// forget script did.
    pub(crate) async fn forget_entry(&self, scope: &Scope, key: &str) {
        if !self.one_server {
            self.write_note(scope, key, Change::Gone).await;
        }
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

/// The caps as the scripts take them, `[records, bytes]`, each `""` for none: the record cap
/// is the most records `ActorCaps::check` lets in, the byte cap the fewest stored bytes it
/// refuses at. Read back from `check` itself, which keeps its limits to itself: the scripts
/// then refuse exactly what it would.
pub(crate) fn cap_args(caps: &ActorCaps) -> [String; 2] {
    let refuses = |records, bytes| {
        let usage = ActorUsage {
            records,
            bytes,
            next_expiry: Duration::ZERO,
        };
        caps.check(&usage, 0).is_err()
    };
    let bytes = first_refused(|bytes| refuses(0, bytes));
    // A byte cap of zero refuses every new record whatever the record cap.
    let records = match bytes {
        Some(0) => None,
        _ => first_refused(|records| refuses(records, 0)).map(|n| n.saturating_sub(1)),
    };
    [records, bytes].map(|cap| cap.map_or_else(String::new, |cap| cap.to_string()))
}

/// The least `n` up to [`LUA_MAX`] that `refused`, monotone, refuses; `None` if it refuses
/// none.
fn first_refused(refused: impl Fn(u64) -> bool) -> Option<u64> {
    if !refused(LUA_MAX) {
        return None;
    }
    let (mut low, mut high) = (0, LUA_MAX);
    while low < high {
        let middle = low + (high - low) / 2;
        if refused(middle) {
            high = middle;
        } else {
            low = middle + 1;
        }
    }
    Some(low)
}

/// The refusal `{2, records, bytes, ms until the first expiry}` of `lua/ledger.lua`'s
/// `refusal`, as the actor's usage.
pub(crate) fn refused(reply: Value) -> Result<ActorUsage> {
    match admitted(reply)? {
        Some(usage) => Ok(usage),
        None => Err(Error::Backend(
            "unexpected reply from Redis: a refusal expected".into(),
        )),
    }
}

/// `admit.lua`'s reply: `None` when the record is counted, else the actor's usage with it.
fn admitted(reply: Value) -> Result<Option<ActorUsage>> {
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
    fn a_counted_record_needs_no_check() {
        assert_eq!(admitted(Value::Array(vec![Value::Int(1)])).unwrap(), None);
        let reply = Value::Array([2, 3, 300, 1500].map(Value::Int).to_vec());
        let usage = admitted(reply.clone()).unwrap().unwrap();
        assert_eq!((usage.records, usage.bytes), (3, 300));
        assert_eq!(usage.next_expiry, Duration::from_millis(1500));
        assert_eq!(refused(reply).unwrap(), usage);
        assert!(admitted(Value::Array(vec![Value::Int(7)])).is_err());
        assert!(refused(Value::Array(vec![Value::Int(1)])).is_err());
    }

    #[test]
    fn the_scripts_get_the_caps_check_applies() {
        let caps = |caps: ActorCaps| cap_args(&caps);
        assert_eq!(caps(ActorCaps::new()), ["", ""]);
        assert_eq!(caps(ActorCaps::new().max_records(2)), ["2", ""]);
        assert_eq!(caps(ActorCaps::new().max_records(0)), ["0", ""]);
        assert_eq!(caps(ActorCaps::new().max_bytes(1500)), ["", "1500"]);
        assert_eq!(
            caps(ActorCaps::new().max_records(10_000).max_bytes(64 << 20)),
            ["10000", "67108864"]
        );
        assert_eq!(
            caps(ActorCaps::new().max_records(5).max_bytes(0)),
            ["", "0"]
        );
        assert_eq!(caps(ActorCaps::new().max_records(u64::MAX)), ["", ""]);
    }
}
