//! Optional per-actor caps on live records and stored bytes (behaviour [§11](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#11-security)): one actor, or
//! one leaked credential, cannot fill the store for everyone else.

use std::time::Duration;

use crate::Error;

/// Limits on what one actor may keep in the store. None by default.
///
/// A store checks them when a request would create a new record, in the transaction that
/// creates it, and refuses with [`Error::ActorCap`] (429 `actor-cap-reached`): nothing is
/// executed and nothing stored. A retry of a request whose record exists is answered from
/// that record as always, cap or not, so a client at its cap still learns what happened.
///
/// ```
/// // `idemkey::ActorCaps` with the facade.
/// let caps = idemkey_core::ActorCaps::new().max_records(10_000).max_bytes(64 << 20);
/// assert!(!caps.is_unlimited());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ActorCaps {
    max_records: Option<u64>,
    max_bytes: Option<u64>,
}

/// Which of the [`ActorCaps`] a request met.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Cap {
    /// The actor's live records.
    Records,
    /// The bytes of the actor's stored responses.
    Bytes,
}

impl std::fmt::Display for Cap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Records => "live records",
            Self::Bytes => "stored bytes",
        })
    }
}

/// What one actor keeps in the store, as a store reads it while creating a record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ActorUsage {
    /// The actor's live records, the one being created included.
    pub records: u64,
    /// The bytes of the actor's stored responses, as stored (the one being created included
    /// if it is stored with its response).
    pub bytes: u64,
    /// Until the first of the actor's live records expires, which frees room.
    pub next_expiry: Duration,
}

impl ActorCaps {
    /// No limits.
    pub fn new() -> Self {
        Self::default()
    }

    /// At most `records` live records per actor: a request that would create one more is
    /// refused.
    #[must_use]
    pub fn max_records(mut self, records: u64) -> Self {
        self.max_records = Some(records);
        self
    }

    /// At most `bytes` of stored responses per actor: once an actor's stored responses take
    /// `bytes` or more, a request that would create a new record is refused. The response
    /// that crosses the cap is stored whole, so an actor may exceed it by one response per
    /// request it has in flight (each bounded by the body limit).
    #[must_use]
    pub fn max_bytes(mut self, bytes: u64) -> Self {
        self.max_bytes = Some(bytes);
        self
    }

    /// Whether no limit is set, so that stores skip the check (and its query) entirely.
    pub fn is_unlimited(&self) -> bool {
        self.max_records.is_none() && self.max_bytes.is_none()
    }

    /// Checks `usage` (a recent reading, or one made in the transaction that creates the
    /// record) for a record whose own stored
    /// response (already counted in `usage.bytes`) takes `new_bytes`.
    pub fn check(&self, usage: &ActorUsage, new_bytes: u64) -> Result<(), Error> {
        let refuse = |cap| Error::ActorCap {
            cap,
            retry_after: crate::retry_after(usage.next_expiry),
        };
        if self.max_records.is_some_and(|max| usage.records > max) {
            return Err(refuse(Cap::Records));
        }
        let earlier = usage.bytes.saturating_sub(new_bytes);
        if self.max_bytes.is_some_and(|max| earlier >= max) {
            return Err(refuse(Cap::Bytes));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(records: u64, bytes: u64) -> ActorUsage {
        ActorUsage {
            records,
            bytes,
            next_expiry: Duration::from_secs(90),
        }
    }

    #[test]
    fn records_are_refused_past_the_cap_only() {
        let caps = ActorCaps::new().max_records(2);
        assert!(caps.check(&usage(2, 0), 0).is_ok());
        let err = caps.check(&usage(3, 0), 0).unwrap_err();
        assert!(
            matches!(err, Error::ActorCap { cap: Cap::Records, retry_after } if retry_after == Duration::from_secs(90))
        );
    }

    #[test]
    fn bytes_count_what_was_stored_before_the_new_record() {
        let caps = ActorCaps::new().max_bytes(100);
        assert!(caps.check(&usage(5, 99), 0).is_ok());
        // The new record's own 50 bytes cross the cap: it is stored whole.
        assert!(caps.check(&usage(5, 149), 50).is_ok());
        assert!(matches!(
            caps.check(&usage(5, 100), 0),
            Err(Error::ActorCap {
                cap: Cap::Bytes,
                ..
            })
        ));
    }

    #[test]
    fn no_caps_refuse_nothing() {
        assert!(ActorCaps::new().is_unlimited());
        assert!(
            ActorCaps::new()
                .check(&usage(u64::MAX, u64::MAX), 0)
                .is_ok()
        );
    }
}
