//! What one side of a workload measured: a latency histogram, counts and wall time.

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use super::cpu::Spent;

/// Latencies are recorded in nanoseconds, from 1 ns to 60 s, to 3 significant figures.
const HIGHEST_NS: u64 = 60_000_000_000;

/// Samples of one side (or one class of responses) of a workload.
#[derive(Clone, Debug)]
pub(crate) struct Samples {
    histogram: Histogram<u64>,
    /// Requests whose answer was not the expected one, by status (`0`: transport error).
    pub(crate) errors: BTreeMap<u16, u64>,
    /// Wall time this side ran for, summed over its rounds.
    pub(crate) elapsed: Duration,
    /// CPU time spent while it ran, summed over its rounds (none for one class of several).
    pub(crate) cpu: Spent,
}

impl Default for Samples {
    fn default() -> Self {
        Self {
            histogram: match Histogram::new_with_bounds(1, HIGHEST_NS, 3) {
                Ok(histogram) => histogram,
                Err(_) => unreachable!("constant bounds that new_with_bounds accepts"),
            },
            errors: BTreeMap::new(),
            elapsed: Duration::ZERO,
            cpu: Spent::default(),
        }
    }
}

impl Samples {
    /// Records an expected answer that took `latency`.
    pub(crate) fn ok(&mut self, latency: Duration) {
        let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.histogram.saturating_record(ns.max(1));
    }

    /// Records an unexpected answer (`status` 0: no answer at all).
    pub(crate) fn error(&mut self, status: u16) {
        *self.errors.entry(status).or_default() += 1;
    }

    /// Adds another worker's or round's samples (not its elapsed time: rounds set that).
    pub(crate) fn merge(&mut self, other: &Self) {
        // Both histograms have the same bounds, so adding cannot fail.
        let _ = self.histogram.add(&other.histogram);
        for (status, count) in &other.errors {
            *self.errors.entry(*status).or_default() += count;
        }
    }

    /// Expected answers recorded.
    pub(crate) fn count(&self) -> u64 {
        self.histogram.len()
    }

    /// Unexpected answers recorded.
    pub(crate) fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }

    /// The latency at quantile `q`, in microseconds.
    pub(crate) fn quantile_us(&self, q: f64) -> f64 {
        if self.histogram.is_empty() {
            return 0.0;
        }
        self.histogram.value_at_quantile(q) as f64 / 1_000.0
    }

    /// The summary reported for these samples under `name`.
    pub(crate) fn summary(&self, name: &str) -> SideSummary {
        let seconds = self.elapsed.as_secs_f64();
        let count = self.count();
        let errors = self.error_count();
        let requests = count + errors;
        let per_request = |spent: Option<Duration>| {
            let spent = spent?.as_secs_f64() * 1e6;
            (requests > 0).then(|| spent / requests as f64)
        };
        SideSummary {
            name: name.to_owned(),
            requests,
            errors,
            error_statuses: self
                .errors
                .iter()
                .map(|(s, n)| (s.to_string(), *n))
                .collect(),
            seconds,
            throughput: if seconds > 0.0 {
                count as f64 / seconds
            } else {
                0.0
            },
            p50_us: self.quantile_us(0.50),
            p99_us: self.quantile_us(0.99),
            p999_us: self.quantile_us(0.999),
            max_us: self.quantile_us(1.0),
            server_cpu_us: per_request(self.cpu.server),
            machine_cpu_us: per_request(self.cpu.machine),
        }
    }
}

/// One row of the report: a side of a workload, or one class of its responses.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct SideSummary {
    /// What was measured (`create with key`).
    pub(crate) name: String,
    /// Requests sent (or transactions run), errors included.
    pub(crate) requests: u64,
    /// Requests whose answer was not the expected one.
    pub(crate) errors: u64,
    /// Those errors by HTTP status (`"0"`: no answer).
    pub(crate) error_statuses: BTreeMap<String, u64>,
    /// Wall time of this side's rounds.
    pub(crate) seconds: f64,
    /// Expected answers per second of this side's wall time.
    pub(crate) throughput: f64,
    /// Latency quantiles and maximum, in microseconds.
    pub(crate) p50_us: f64,
    /// 99th percentile.
    pub(crate) p99_us: f64,
    /// 99.9th percentile.
    pub(crate) p999_us: f64,
    /// Maximum.
    pub(crate) max_us: f64,
    /// The server's CPU time per request, in microseconds, if the bench started it.
    pub(crate) server_cpu_us: Option<f64>,
    /// The machine's busy CPU time per request (client, server and database), in
    /// microseconds, on Linux.
    pub(crate) machine_cpu_us: Option<f64>,
}

/// The median of `values` (0 for none).
pub(crate) fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_of_odd_and_even_counts() {
        assert_eq!(median(&[]), 0.0);
        assert_eq!(median(&[1.02, 0.98, 1.0]), 1.0);
        assert!((median(&[1.0, 0.9, 1.1, 0.96]) - 0.98).abs() < 1e-12);
    }

    #[test]
    fn samples_merge_and_summarise() {
        let mut a = Samples::default();
        a.ok(Duration::from_micros(100));
        a.error(500);
        let mut b = Samples::default();
        b.ok(Duration::from_micros(300));
        b.error(0);
        a.merge(&b);
        a.elapsed = Duration::from_secs(2);
        let summary = a.summary("x");
        assert_eq!((summary.requests, summary.errors), (4, 2));
        assert!((summary.throughput - 1.0).abs() < 1e-9);
        assert!((summary.max_us - 300.0).abs() < 1.0);
        assert_eq!(summary.error_statuses["500"], 1);
    }
}
