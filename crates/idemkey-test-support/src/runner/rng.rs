//! A seeded SplitMix64 for the campaigns that kill and cut at random: the same seed gives the
//! same schedule, on every platform.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A small, reproducible pseudo-random generator.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// The generator of `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The seed from `var` if set, else one from the clock.
    pub fn seed_from_env(var: &str) -> u64 {
        match std::env::var(var) {
            Ok(text) => text
                .parse()
                .unwrap_or_else(|_| panic!("{var}={text} is not a u64")),
            Err(_) => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64,
        }
    }

    /// A generator of its own for stream `n`, independent of this one's draws.
    pub fn fork(&self, n: u64) -> Self {
        Self(self.0 ^ n.wrapping_mul(0xA24B_AED4_963E_E407))
    }

    /// The next 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `low..high` (`low` when the range is empty).
    pub fn range(&mut self, low: u64, high: u64) -> u64 {
        if high <= low {
            return low;
        }
        low + self.next_u64() % (high - low)
    }

    /// A duration of `low..high` milliseconds, uniform.
    pub fn millis(&mut self, low: u64, high: u64) -> Duration {
        Duration::from_millis(self.range(low, high))
    }

    /// True with probability 1/n.
    pub fn one_in(&mut self, n: u64) -> bool {
        self.range(0, n.max(1)) == 0
    }
}

/// A number from the environment variable `var`, or `default`.
pub fn env_or(var: &str, default: u64) -> u64 {
    std::env::var(var).map_or(default, |text| {
        text.parse()
            .unwrap_or_else(|_| panic!("{var}={text} is not a number"))
    })
}
