//! The results: tables on stdout and a JSON document.

use std::borrow::Cow;
use std::path::Path;

use anyhow::Context;
use comfy_table::{CellAlignment, ContentArrangement, Table, presets::UTF8_FULL_CONDENSED};
use serde::Serialize;

use super::stats::SideSummary;

/// One workload's rows.
#[derive(Debug, Serialize)]
pub(crate) struct WorkloadReport {
    /// The workload's name (`create`; `proxy-create (sqlite-full)` for a proxy workload in
    /// front of another API than the in-memory one).
    pub(crate) name: Cow<'static, str>,
    /// Its sides, or its classes of responses.
    pub(crate) sides: Vec<SideSummary>,
    /// What else it observed.
    pub(crate) notes: Vec<String>,
}

impl WorkloadReport {
    /// A report with no notes.
    pub(crate) fn new(name: impl Into<Cow<'static, str>>, sides: Vec<SideSummary>) -> Self {
        Self {
            name: name.into(),
            sides,
            notes: Vec::new(),
        }
    }
}

/// A ratio measured in this run, and the target it is held to.
#[derive(Debug, Serialize)]
pub(crate) struct Ratio {
    /// What is divided by what.
    pub(crate) name: String,
    /// The ratio (0 when the denominator is 0).
    pub(crate) value: f64,
    /// The target, as text (`>= 0.9`); empty when there is none.
    pub(crate) target: String,
    /// Whether the target is met; `None` without a target.
    pub(crate) met: Option<bool>,
    /// A correctness check (exactly one note per key) rather than a performance target.
    pub(crate) check: bool,
}

fn divide(numerator: f64, denominator: f64) -> f64 {
    if denominator > 0.0 {
        numerator / denominator
    } else {
        0.0
    }
}

impl Ratio {
    /// `numerator / denominator` must be at least `target`.
    pub(crate) fn at_least(name: &str, numerator: f64, denominator: f64, target: f64) -> Self {
        let value = divide(numerator, denominator);
        Self {
            name: name.to_owned(),
            value,
            target: format!(">= {target}"),
            met: Some(denominator > 0.0 && value >= target),
            check: false,
        }
    }

    /// `numerator / denominator` must be at most `target`.
    pub(crate) fn at_most(name: &str, numerator: f64, denominator: f64, target: f64) -> Self {
        let value = divide(numerator, denominator);
        Self {
            name: name.to_owned(),
            value,
            target: format!("<= {target}"),
            met: Some(denominator > 0.0 && value <= target),
            check: false,
        }
    }

    /// A ratio reported without a target.
    pub(crate) fn info(name: &str, numerator: f64, denominator: f64) -> Self {
        Self {
            name: name.to_owned(),
            value: divide(numerator, denominator),
            target: String::new(),
            met: None,
            check: false,
        }
    }

    /// A count that must equal `expected` (reported as the share of it).
    pub(crate) fn exact(name: &str, count: f64, expected: f64) -> Self {
        Self {
            name: format!("{name} ({count} of {expected})"),
            value: divide(count, expected),
            target: "= 1".to_owned(),
            met: Some(expected > 0.0 && count == expected),
            check: true,
        }
    }
}

/// Everything one `idemkey-bench` run measured.
#[derive(Debug, Serialize)]
pub(crate) struct Report {
    /// How the run was set up.
    pub(crate) setup: serde_json::Value,
    /// The workloads, in the order they ran.
    pub(crate) workloads: Vec<WorkloadReport>,
    /// The ratios against their targets.
    pub(crate) ratios: Vec<Ratio>,
}

impl Report {
    /// Whether a correctness check failed.
    pub(crate) fn check_failed(&self) -> bool {
        self.ratios.iter().any(|r| r.check && r.met == Some(false))
    }

    /// The workloads' rows, then the ratios.
    pub(crate) fn tables(&self) -> String {
        let mut rows = table(&[
            "workload",
            "side",
            "requests",
            "errors",
            "req/s",
            "p50 ms",
            "p99 ms",
            "p99.9 ms",
            "server CPU µs/req",
            "machine CPU µs/req",
        ]);
        for workload in &self.workloads {
            for side in &workload.sides {
                rows.add_row([
                    workload.name.to_string(),
                    side.name.clone(),
                    side.requests.to_string(),
                    side.errors.to_string(),
                    format!("{:.0}", side.throughput),
                    ms(side.p50_us),
                    ms(side.p99_us),
                    ms(side.p999_us),
                    micros(side.server_cpu_us),
                    micros(side.machine_cpu_us),
                ]);
            }
        }
        align_numbers(&mut rows, 2..10);
        let mut ratios = table(&["ratio", "measured", "target", "met"]);
        for ratio in &self.ratios {
            let met = match ratio.met {
                Some(true) => "yes",
                Some(false) => "NO",
                None => "-",
            };
            ratios.add_row([
                ratio.name.clone(),
                format!("{:.3}", ratio.value),
                ratio.target.clone(),
                met.to_owned(),
            ]);
        }
        let notes: String = self
            .workloads
            .iter()
            .flat_map(|w| w.notes.iter().map(move |n| format!("{}: {n}\n", w.name)))
            .collect();
        let load = |key: &str| self.setup[key].as_str().unwrap_or("?").to_owned();
        let load = format!(
            "load average (1 5 15 min): {} before, {} after\n",
            load("load_before"),
            load("load_after")
        );
        format!("{rows}\n{ratios}\n{notes}{load}")
    }

    /// Writes the report as pretty JSON to `path`.
    pub(crate) fn write_json(&self, path: &Path) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(self)?;
        std::fs::write(path, text + "\n")
            .with_context(|| format!("cannot write {}", path.display()))
    }
}

fn table(header: &[&str]) -> Table {
    let mut table = Table::new();
    table.load_style(UTF8_FULL_CONDENSED);
    table.set_content_arrangement(ContentArrangement::Dynamic);
    table.set_header(header.to_vec());
    table
}

fn align_numbers(table: &mut Table, columns: std::ops::Range<usize>) {
    for index in columns {
        if let Some(column) = table.column_mut(index) {
            column.set_cell_alignment(CellAlignment::Right);
        }
    }
}

fn ms(us: f64) -> String {
    format!("{:.3}", us / 1_000.0)
}

fn micros(us: Option<f64>) -> String {
    us.map_or_else(|| "-".to_owned(), |us| format!("{us:.0}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_hold_their_targets() {
        assert_eq!(Ratio::at_least("x", 95.0, 100.0, 0.9).met, Some(true));
        assert_eq!(Ratio::at_least("x", 85.0, 100.0, 0.9).met, Some(false));
        assert_eq!(Ratio::at_most("x", 6.0, 1.0, 5.0).met, Some(false));
        assert_eq!(Ratio::at_least("x", 1.0, 0.0, 0.9).met, Some(false));
        assert_eq!(Ratio::exact("x", 3.0, 3.0).met, Some(true));
        assert_eq!(Ratio::info("x", 1.0, 2.0).met, None);
    }
}
