//! The retry budget: a token bucket per host, so that in an outage the retries of every
//! caller together stay within a burst and a rate, however many callers fail at once.
//!
//! The buckets are the process's, one per host and budget setting, shared by every middleware
//! with that setting, as the AWS SDKs share theirs among the clients of one retry partition:
//! callers that built clients of their own still retry against one host within one budget.
//!
//! A retry takes its tokens when it is decided. When the bucket holds too few, it takes them
//! anyway, into debt, and waits until the refill has paid the debt: retries beyond the burst
//! are spread at the refill rate, in the order they were decided, and none is refused while
//! its wait fits the caller's time. Tokens taken in a span of `t` seconds therefore number at
//! most `burst + per_second * t` plus what was given back, and only a final answer gives
//! tokens back.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use reqwest::Url;
use tokio::time::Instant;

use crate::policy::Budget;

/// Buckets beyond this many are pruned of the full ones, so that a client that talks to
/// many hosts keeps only the buckets that still remember an outage.
const PRUNE_ABOVE: usize = 1024;

/// Buckets by host and budget setting.
#[derive(Debug, Default)]
pub(crate) struct Budgets {
    buckets: Mutex<HashMap<(String, Budget), Bucket>>,
}

/// One host's tokens: negative while retries wait for the refill.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Budgets {
    /// The process's buckets.
    pub(crate) fn shared() -> &'static Self {
        static SHARED: OnceLock<Budgets> = OnceLock::new();
        SHARED.get_or_init(Self::default)
    }

    /// Takes `cost` tokens of `budget` for a retry to `url` at `now` and returns how long the
    /// retry must wait for them (zero when the bucket held them); `None`, taking nothing,
    /// when that wait would be longer than `within`.
    pub(crate) fn take(
        &self,
        budget: Budget,
        url: &Url,
        cost: u32,
        now: Instant,
        within: Duration,
    ) -> Option<Duration> {
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let bucket = refilled(&mut buckets, budget, url, now);
        let left = bucket.tokens - f64::from(cost);
        let wait = if left >= 0.0 {
            Duration::ZERO
        } else if budget.per_second == 0 {
            return None;
        } else {
            Duration::try_from_secs_f64(-left / f64::from(budget.per_second)).ok()?
        };
        if wait > within {
            return None;
        }
        bucket.tokens = left;
        Some(wait)
    }

    /// Gives back `cost` tokens of `budget` taken for `url`: its retries ended in a final
    /// answer.
    pub(crate) fn give_back(&self, budget: Budget, url: &Url, cost: u32, now: Instant) {
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let bucket = refilled(&mut buckets, budget, url, now);
        bucket.tokens = (bucket.tokens + f64::from(cost)).min(f64::from(budget.burst));
    }
}

/// The bucket of `url` and `budget`, refilled up to `now`.
fn refilled<'b>(
    buckets: &'b mut HashMap<(String, Budget), Bucket>,
    budget: Budget,
    url: &Url,
    now: Instant,
) -> &'b mut Bucket {
    if buckets.len() > PRUNE_ABOVE {
        buckets.retain(|(_, budget), bucket| bucket.refill(*budget, now) < f64::from(budget.burst));
    }
    let burst = f64::from(budget.burst);
    let bucket = buckets.entry((host(url), budget)).or_insert(Bucket {
        tokens: burst,
        at: now,
    });
    bucket.tokens = bucket.refill(budget, now);
    bucket.at = bucket.at.max(now);
    bucket
}

impl Bucket {
    /// The tokens the bucket holds at `now`.
    fn refill(&self, budget: Budget, now: Instant) -> f64 {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        (self.tokens + f64::from(budget.per_second) * elapsed).min(f64::from(budget.burst))
    }
}

/// The bucket's name: scheme, host and port.
fn host(url: &Url) -> String {
    format!(
        "{}://{}:{}",
        url.scheme(),
        url.host_str().unwrap_or(""),
        url.port_or_known_default().unwrap_or(0)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Buckets of their own, and the `budget` the test takes from them with.
    struct Test(Budgets, Budget);

    impl Test {
        fn take(&self, url: &Url, cost: u32, now: Instant, within: Duration) -> Option<Duration> {
            self.0.take(self.1, url, cost, now, within)
        }

        fn give_back(&self, url: &Url, cost: u32, now: Instant) {
            self.0.give_back(self.1, url, cost, now);
        }
    }

    fn budgets(burst: u32, per_second: u32) -> Test {
        Test(Budgets::default(), Budget { burst, per_second })
    }

    fn url(text: &str) -> Url {
        text.parse().unwrap()
    }

    const LONG: Duration = Duration::from_secs(3600);

    #[test]
    fn the_burst_goes_without_waiting_then_retries_are_spread_at_the_rate() {
        let budgets = budgets(3, 2);
        let (a, now) = (url("http://a.example/"), Instant::now());
        for _ in 0..3 {
            assert_eq!(budgets.take(&a, 1, now, LONG), Some(Duration::ZERO));
        }
        let waits: Vec<_> = (0..4)
            .map(|_| budgets.take(&a, 1, now, LONG).unwrap())
            .collect();
        let expected = [500, 1000, 1500, 2000].map(Duration::from_millis);
        assert_eq!(waits, expected);
    }

    #[test]
    fn the_bucket_refills_over_time_up_to_the_burst() {
        let budgets = budgets(2, 10);
        let (a, start) = (url("http://a.example/"), Instant::now());
        budgets.take(&a, 2, start, LONG);
        let later = start + Duration::from_secs(60);
        assert_eq!(budgets.take(&a, 2, later, LONG), Some(Duration::ZERO));
        assert_eq!(
            budgets.take(&a, 1, later, LONG),
            Some(Duration::from_millis(100))
        );
    }

    #[test]
    fn a_wait_longer_than_the_time_left_takes_nothing() {
        let budgets = budgets(1, 1);
        let (a, now) = (url("http://a.example/"), Instant::now());
        budgets.take(&a, 1, now, LONG);
        assert_eq!(budgets.take(&a, 2, now, Duration::from_secs(1)), None);
        assert_eq!(
            budgets.take(&a, 1, now, Duration::from_secs(1)),
            Some(Duration::from_secs(1))
        );
    }

    #[test]
    fn no_refill_and_an_empty_bucket_refuses() {
        let budgets = budgets(1, 0);
        let (a, now) = (url("http://a.example/"), Instant::now());
        assert_eq!(budgets.take(&a, 1, now, LONG), Some(Duration::ZERO));
        assert_eq!(budgets.take(&a, 1, now, LONG), None);
    }

    #[test]
    fn another_budget_setting_has_a_bucket_of_its_own() {
        let budgets = budgets(1, 1);
        let (a, now) = (url("http://a.example/"), Instant::now());
        budgets.take(&a, 1, now, LONG);
        let other = Budget {
            burst: 2,
            per_second: 1,
        };
        assert_eq!(
            budgets.0.take(other, &a, 1, now, LONG),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn hosts_have_buckets_of_their_own_and_paths_share_one() {
        let budgets = budgets(1, 1);
        let now = Instant::now();
        budgets.take(&url("http://a.example/x"), 1, now, LONG);
        let same = budgets.take(&url("http://a.example:80/y"), 1, now, LONG);
        assert_eq!(same, Some(Duration::from_secs(1)));
        let other = budgets.take(&url("http://b.example/x"), 1, now, LONG);
        assert_eq!(other, Some(Duration::ZERO));
        let other_port = budgets.take(&url("http://a.example:81/"), 1, now, LONG);
        assert_eq!(other_port, Some(Duration::ZERO));
    }

    #[test]
    fn tokens_given_back_pay_the_debt_and_never_pass_the_burst() {
        let budgets = budgets(2, 1);
        let (a, now) = (url("http://a.example/"), Instant::now());
        budgets.take(&a, 2, now, LONG);
        budgets.take(&a, 1, now, LONG);
        budgets.give_back(&a, 3, now);
        assert_eq!(budgets.take(&a, 2, now, LONG), Some(Duration::ZERO));
        budgets.give_back(&a, 100, now);
        assert_eq!(budgets.take(&a, 3, now, LONG), Some(Duration::from_secs(1)));
    }
}
