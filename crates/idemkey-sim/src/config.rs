//! What a run simulates: its population, its times, how often things go wrong, and a planted bug.

use std::time::Duration;

/// A bug planted in the store, to show that the checker catches it (see `bugs.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bug {
    /// `complete`, `release` and `extend` ignore the fencing token.
    NoFencing,
    /// Leases and expiry are measured by each application instance's clock, which are
    /// skewed, instead of by the store's one clock.
    AppLeaseClock,
    /// `release` ignores the fencing token.
    ReleaseWithoutToken,
}

/// How often each store call goes wrong, per call.
#[derive(Clone, Debug)]
pub struct Faults {
    /// The call is slowed, before and after it applies, by up to `max_delay` each.
    pub slow: f64,
    /// The call fails before it applies (`Unavailable`).
    pub fail: f64,
    /// A write applies, then its reply is lost (`OutcomeUnknown` or `Unavailable`).
    pub lose_reply: f64,
    /// The longest slowdown.
    pub max_delay: Duration,
    /// A lease renewal is held back by up to a lease: a delayed heartbeat.
    pub delay_heartbeat: f64,
}

/// What becomes of one execution of the handler, per execution.
#[derive(Clone, Debug)]
pub struct Fates {
    /// The executor is paused (its heartbeat with it), before or after its external call.
    pub pause: f64,
    /// The longest pause; pauses run from half a lease to this.
    pub max_pause: Duration,
    /// The executor is killed before its external call.
    pub kill_before: f64,
    /// The executor is killed after its external call, before answering.
    pub kill_after: f64,
    /// The handler answers 503, so the claim is released for a retry.
    pub fail: f64,
}

/// Everything a run is made of, but the seed.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// How many actors (tenants) send requests.
    pub actors: u8,
    /// How many concurrent clients each actor runs: duplicates of one key race.
    pub clients_per_actor: u8,
    /// How many keys each actor uses.
    pub keys_per_actor: u8,
    /// How many requests (each retried until answered) each client sends.
    pub rounds: u32,
    /// How many application instances (layers) share the store.
    pub instances: u8,
    /// The layer's lease (renewed every third of it).
    pub lease: Duration,
    /// The layer's retention: short, so that records expire during the run.
    pub retention: Duration,
    /// How often a request is retried, at most, before the client gives up on it.
    pub max_attempts: u32,
    /// The longest a client waits for an answer; attempts draw from a tenth of it up.
    pub client_timeout: Duration,
    /// Store faults.
    pub faults: Faults,
    /// Executor fates.
    pub fates: Fates,
    /// A planted bug, or `None` for idemkey as it is.
    pub bug: Option<Bug>,
}

impl Default for SimConfig {
    fn default() -> Self {
        let lease = Duration::from_secs(30);
        Self {
            actors: 3,
            clients_per_actor: 2,
            keys_per_actor: 3,
            rounds: 6,
            instances: 3,
            lease,
            retention: Duration::from_secs(120),
            max_attempts: 8,
            client_timeout: Duration::from_secs(90),
            faults: Faults {
                slow: 0.2,
                fail: 0.05,
                lose_reply: 0.05,
                max_delay: Duration::from_secs(3),
                delay_heartbeat: 0.1,
            },
            fates: Fates {
                pause: 0.2,
                max_pause: lease * 3,
                kill_before: 0.04,
                kill_after: 0.06,
                fail: 0.08,
            },
            bug: None,
        }
    }
}

impl SimConfig {
    /// The same run with `bug` planted.
    #[must_use]
    pub fn with_bug(mut self, bug: Bug) -> Self {
        self.bug = Some(bug);
        self
    }
}
