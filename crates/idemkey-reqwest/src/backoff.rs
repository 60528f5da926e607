//! Exponential backoff with full jitter: the wait before retry `n` is uniform in
//! `[0, min(max, initial × 2ⁿ)]`, so that clients that failed together do not retry together.

use std::time::Duration;

use rand::Rng;

/// The wait before the retry that follows `retries` earlier ones.
pub(crate) fn full_jitter(
    initial: Duration,
    max: Duration,
    retries: u32,
    rng: &mut impl Rng,
) -> Duration {
    let ceiling = initial
        .checked_mul(1u32.checked_shl(retries).unwrap_or(u32::MAX))
        .unwrap_or(max)
        .min(max);
    let nanos = u64::try_from(ceiling.as_nanos()).unwrap_or(u64::MAX);
    Duration::from_nanos(rng.random_range(0..=nanos))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    const INITIAL: Duration = Duration::from_millis(500);
    const MAX: Duration = Duration::from_secs(5);

    #[test]
    fn each_wait_stays_under_its_doubling_ceiling() {
        let mut rng = StdRng::seed_from_u64(7);
        let ceilings = [500, 1000, 2000, 4000, 5000, 5000, 5000];
        for (retries, ceiling) in ceilings.into_iter().enumerate() {
            let ceiling = Duration::from_millis(ceiling);
            for _ in 0..200 {
                let wait = full_jitter(INITIAL, MAX, retries as u32, &mut rng);
                assert!(wait <= ceiling, "retry {retries}: {wait:?} > {ceiling:?}");
            }
        }
    }

    #[test]
    fn the_waits_spread_over_the_whole_range() {
        let mut rng = StdRng::seed_from_u64(7);
        let waits: Vec<Duration> = (0..400)
            .map(|_| full_jitter(INITIAL, MAX, 10, &mut rng))
            .collect();
        assert!(waits.iter().any(|w| *w < Duration::from_secs(1)));
        assert!(waits.iter().any(|w| *w > Duration::from_secs(4)));
    }

    #[test]
    fn huge_retry_counts_do_not_overflow() {
        let mut rng = StdRng::seed_from_u64(7);
        assert!(full_jitter(INITIAL, MAX, u32::MAX, &mut rng) <= MAX);
    }
}
