//! What each actor keeps in the store, as the per-actor caps last read it (behaviour [§11](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#11-security)).
//!
//! Reading an actor's usage is a query over all its live records, whose cost grows with
//! them: at the default cap of the proxy (100,000 records) that is tens of milliseconds of
//! the database's time for every new key. So a reading is kept for [`FRESH`], and in
//! between the process counts the records it creates itself on top of it. Records other
//! processes create, and records that expire, show at the next reading.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use idemkey_core::{ActorCaps, ActorUsage, Result};

/// How long a reading of an actor's usage stands in for the database's.
pub(crate) const FRESH: Duration = Duration::from_secs(1);

/// Past this many actors kept, readings older than [`FRESH`] are dropped.
const KEPT: usize = 4096;

/// The latest reading of each actor's usage, and what this process created since.
#[derive(Debug, Default)]
pub(crate) struct Usages(Mutex<HashMap<String, Reading>>);

#[derive(Clone, Copy, Debug)]
struct Reading {
    at: Instant,
    /// The reading, with what this process created since added.
    usage: ActorUsage,
}

impl Usages {
    fn kept(&self) -> MutexGuard<'_, HashMap<String, Reading>> {
        // A panic while the lock was held left the readings as they were: go on with them.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Changes the usage of `actor`'s reading, if one is kept, by what this process did.
    fn update(&self, actor: &str, change: impl FnOnce(&mut ActorUsage)) {
        if let Some(reading) = self.kept().get_mut(actor) {
            change(&mut reading.usage);
        }
    }

    /// Checks `caps` for one more record of `actor` storing `new_bytes`, against a fresh
    /// reading if one is kept (`None` otherwise: read the database), counting the record
    /// if it passes.
    pub(crate) fn check(
        &self,
        caps: &ActorCaps,
        actor: &str,
        new_bytes: u64,
    ) -> Option<Result<()>> {
        let mut kept = self.kept();
        let reading = kept.get_mut(actor).filter(|r| r.at.elapsed() < FRESH)?;
        let usage = ActorUsage {
            records: reading.usage.records + 1,
            bytes: reading.usage.bytes + new_bytes,
            ..reading.usage
        };
        let checked = caps.check(&usage, new_bytes);
        if checked.is_ok() {
            reading.usage = usage;
        }
        Some(checked)
    }

    /// Takes back the record [`Self::check`] counted for `actor`, which was not created
    /// (the claim met a live record, or failed).
    pub(crate) fn unreserve(&self, actor: &str) {
        self.update(actor, |usage| {
            usage.records = usage.records.saturating_sub(1);
        });
    }

    /// Keeps `usage`, just read in the transaction creating a record of `actor` (and so
    /// counting it); `created` says whether the caps let it be created.
    pub(crate) fn keep(&self, actor: &str, mut usage: ActorUsage, created: bool, new_bytes: u64) {
        if !created {
            usage.records = usage.records.saturating_sub(1);
            usage.bytes = usage.bytes.saturating_sub(new_bytes);
        }
        let mut kept = self.kept();
        if kept.len() >= KEPT {
            kept.retain(|_, reading| reading.at.elapsed() < FRESH);
        }
        let at = Instant::now();
        kept.insert(actor.to_owned(), Reading { at, usage });
    }

    /// Adds `bytes`, a response this process just stored in a record of `actor`, to the
    /// actor's reading if one is kept.
    pub(crate) fn stored(&self, actor: &str, bytes: u64) {
        self.update(actor, |usage| usage.bytes += bytes);
    }

    /// Drops the reading of `actor`, whose records were just deleted here.
    pub(crate) fn forget(&self, actor: &str) {
        self.kept().remove(actor);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(records: u64) -> ActorUsage {
        ActorUsage {
            records,
            bytes: 0,
            next_expiry: Duration::from_secs(60),
        }
    }

    #[test]
    fn a_kept_reading_counts_the_records_created_since() {
        let usages = Usages::default();
        let caps = ActorCaps::new().max_records(3);
        assert!(usages.check(&caps, "a", 0).is_none(), "nothing read yet");
        usages.keep("a", usage(2), true, 0);
        assert!(
            matches!(usages.check(&caps, "a", 0), Some(Ok(()))),
            "the third"
        );
        assert!(
            matches!(usages.check(&caps, "a", 0), Some(Err(_))),
            "a fourth is past the cap"
        );
        assert!(
            usages.check(&caps, "b", 0).is_none(),
            "another actor is read"
        );
        usages.forget("a");
        assert!(usages.check(&caps, "a", 0).is_none(), "read again");
    }

    #[test]
    fn stored_responses_count_towards_the_byte_cap() {
        let usages = Usages::default();
        let caps = ActorCaps::new().max_bytes(100);
        usages.keep("a", usage(1), true, 0);
        usages.stored("a", 60);
        assert!(matches!(usages.check(&caps, "a", 0), Some(Ok(()))));
        usages.stored("a", 60);
        assert!(
            matches!(usages.check(&caps, "a", 0), Some(Err(_))),
            "120 bytes"
        );
    }

    #[test]
    fn a_refused_reading_does_not_count_the_refused_record() {
        let usages = Usages::default();
        let caps = ActorCaps::new().max_records(3);
        // Read with the refused fourth record counted; it was rolled back.
        usages.keep("a", usage(4), false, 0);
        assert!(matches!(usages.check(&caps, "a", 0), Some(Err(_))));
        usages.keep("a", usage(3), false, 0);
        assert!(
            matches!(usages.check(&caps, "a", 0), Some(Ok(()))),
            "room for one"
        );
    }

    #[test]
    fn a_record_reserved_and_not_created_is_taken_back() {
        let usages = Usages::default();
        let caps = ActorCaps::new().max_records(2);
        usages.keep("a", usage(1), true, 0);
        assert!(usages.check(&caps, "a", 0).is_some_and(|c| c.is_ok()));
        usages.unreserve("a");
        assert!(usages.check(&caps, "a", 0).is_some_and(|c| c.is_ok()));
        assert!(
            usages.check(&caps, "a", 0).is_some_and(|c| c.is_err()),
            "two records counted after the taken-back one: at the cap"
        );
    }
}
