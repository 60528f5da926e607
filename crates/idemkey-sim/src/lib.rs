//! A deterministic simulation of idemkey's lease mode through its real code.
//!
//! Clients of several actors send requests under a few keys each, and retry them, to several
//! instances of the real [`idemkey_tower::IdempotencyLayer`] over one real
//! [`idemkey_core::MemoryStore`], on tokio's paused clock (the store's clock too). A seeded
//! generator decides every choice: which client sends what to which instance, how long
//! everything takes, which store calls are slowed, fail or lose their reply after applying,
//! which executors are paused past their lease or killed, when the sweeper runs. The history
//! of the run is then checked for six broken promises ([`Property`]).
//!
//! [`run`] simulates and checks one seed; `tests/` runs many. `docs/simulation.md` has the
//! design, the definitions and the results.

mod bugs;
mod check;
mod client;
mod clock;
mod config;
mod external;
mod handler;
mod history;
mod reference;
mod sim;
mod stats;
mod store;
mod world;

use std::fmt;

pub use config::{Bug, Fates, Faults, SimConfig};
pub use history::{Answer, Applied, Entry, Event, Exec, History, OpKind, Reply, Seen, SeenState};
pub use stats::Stats;

/// A promise of lease mode (behaviour [§1](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#1-words-and-guarantees), [§5](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#5-decisions), [§8a](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#8a-external-effects-lease-mode), [§9](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#9-retention-and-time), [§10](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#10-errors)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Property {
    /// A key executed twice where once was promised: two executors of one record at once (a
    /// takeover before the lease ended), a second record while the first lived, or two
    /// effects for one record.
    DoubleExecution,
    /// A replay that differs from the response stored.
    ReplayMismatch,
    /// A response delivered for another actor's, key's or body's request.
    CrossDelivery,
    /// A stored or acknowledged response lost while its record should live.
    AckLost,
    /// A claim still blocking its key after its lease ended.
    StuckClaim,
    /// An owner that completed, released or renewed after it lost its claim.
    StaleOwner,
}

impl fmt::Display for Property {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::DoubleExecution => "two effective executions",
            Self::ReplayMismatch => "a replay that differs from the stored response",
            Self::CrossDelivery => "a response delivered to another request",
            Self::AckLost => "an acknowledged write lost",
            Self::StuckClaim => "a claim stuck past its lease",
            Self::StaleOwner => "a stale owner that completed, released or renewed",
        })
    }
}

/// A failed run: its seed, the promise broken, when, and how.
#[derive(Clone, Debug)]
pub struct Violation {
    /// The seed that replays it.
    pub seed: u64,
    /// The promise broken.
    pub property: Property,
    /// When, in virtual ms since the start.
    pub at_ms: u64,
    /// What happened.
    pub detail: String,
    /// The whole history.
    pub history: History,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "seed {}: {} at {} ms: {}\n  replay: IDEMKEY_SIM_SEED={} cargo test -p idemkey-sim --test seeds replay_one_seed -- --ignored --nocapture",
            self.seed, self.property, self.at_ms, self.detail, self.seed
        )
    }
}

impl std::error::Error for Violation {}

/// Simulates `seed` and checks its history: the history, or the first promise it breaks.
pub fn run(seed: u64, config: &SimConfig) -> Result<History, Violation> {
    let history = sim::simulate(seed, config);
    match check::check(&history) {
        Ok(()) => Ok(history),
        Err((property, at_ms, detail)) => Err(Violation {
            seed,
            property,
            at_ms,
            detail,
            history,
        }),
    }
}
