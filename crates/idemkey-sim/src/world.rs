//! The state a run shares: seeded randomness, the virtual clock, the history, the executors.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use idemkey_core::{Claim, RecordId};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::SimConfig;
use crate::clock::SimClock;
use crate::external::External;
use crate::history::{Entry, Event, Exec, History};

/// Where an executor is, as the store wrapper needs to know it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Executor {
    /// Running.
    Running,
    /// Paused (its process frozen) until this virtual ms.
    Paused { until_ms: u64 },
    /// Killed: nothing it sends reaches the store any more.
    Dead,
    /// Its handler has answered.
    Finished,
}

/// Locks a mutex; no lock is held across a panic that matters here, so poisoning is ignored.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What a run shares.
pub(crate) struct World {
    pub(crate) config: SimConfig,
    pub(crate) clock: SimClock,
    pub(crate) external: External,
    rng: Mutex<ChaCha8Rng>,
    history: Mutex<History>,
    /// Record ids are random: they are numbered in order of first appearance instead, so
    /// that the history of a seed is the same on every run. Only looked up, never iterated.
    records: Mutex<HashMap<RecordId, u32>>,
    executors: Mutex<HashMap<Exec, Executor>>,
    attempts: AtomicU64,
    healing: AtomicBool,
}

impl World {
    pub(crate) fn new(seed: u64, config: SimConfig, clock: SimClock) -> Self {
        Self {
            config,
            clock,
            external: External::default(),
            rng: Mutex::new(ChaCha8Rng::seed_from_u64(seed)),
            history: Mutex::default(),
            records: Mutex::default(),
            executors: Mutex::default(),
            attempts: AtomicU64::new(0),
            healing: AtomicBool::new(false),
        }
    }

    /// Appends an event at the current virtual time.
    pub(crate) fn log(&self, event: Event) {
        let at_ms = self.clock.elapsed_ms();
        lock(&self.history).entries.push(Entry { at_ms, event });
    }

    pub(crate) fn take_history(&self) -> History {
        std::mem::take(&mut *lock(&self.history))
    }

    /// Whether an event with probability `p` happens (never while healing).
    pub(crate) fn chance(&self, p: f64) -> bool {
        !self.healing() && lock(&self.rng).random_bool(p.clamp(0.0, 1.0))
    }

    /// A number drawn from `range`.
    pub(crate) fn draw(&self, range: Range<u64>) -> u64 {
        if range.is_empty() {
            return range.start;
        }
        lock(&self.rng).random_range(range)
    }

    /// A duration drawn from `lo..hi`, in whole ms.
    pub(crate) fn duration(&self, lo: Duration, hi: Duration) -> Duration {
        Duration::from_millis(self.draw(ms(lo)..ms(hi)))
    }

    pub(crate) fn next_attempt(&self) -> u64 {
        self.attempts.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// The execution a claim stands for, its record numbered on first sight.
    pub(crate) fn exec(&self, record_id: RecordId, token: i64) -> Exec {
        let mut records = lock(&self.records);
        let next = u32::try_from(records.len()).unwrap_or(u32::MAX);
        let record = *records.entry(record_id).or_insert(next);
        Exec { record, token }
    }

    pub(crate) fn exec_of(&self, claim: &Claim) -> Exec {
        self.exec(claim.record_id, claim.token)
    }

    pub(crate) fn executor(&self, exec: Exec) -> Option<Executor> {
        lock(&self.executors).get(&exec).copied()
    }

    pub(crate) fn set_executor(&self, exec: Exec, state: Executor) {
        lock(&self.executors).insert(exec, state);
    }

    pub(crate) fn healing(&self) -> bool {
        self.healing.load(Ordering::SeqCst)
    }

    /// Stops every fault and fate from now on.
    pub(crate) fn heal(&self) {
        self.healing.store(true, Ordering::SeqCst);
        self.log(Event::Heal);
    }
}

pub(crate) fn ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
