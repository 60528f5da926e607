//! `idemkey-bench`: what idempotency costs against the business write it protects. The
//! binary parses [`BenchArgs`] and calls [`run`]; the service it measures is the `serve` of
//! the `idemkey` binary it is given (`--idemkey PATH`), started as a child process, or any
//! service given with `--url`.
//!
//! Every workload compares two things measured against one server in one run, alternating
//! the two sides in short rounds so that drift hits both: create with a key against create
//! without one, a replay against a plain GET, a duplicate storm against a burst of distinct
//! keys and lone requests, the service against the raw two-row transaction (`ceiling`),
//! in-process, a router with the layer against the same router without it (`layer`),
//! keyed creates through the client middleware against plain reqwest (`middleware`), and, on
//! MySQL, the statements of a keyed create against those of a key-less one (`statements`),
//! and, through the `idemkey` binary's `proxy` in front of a small API the bench runs itself
//! (its notes in memory, or a row per create in a SQLite file at `synchronous = NORMAL` or
//! `FULL`: `--upstream`), a keyed create against a forwarded key-less one and one straight to
//! the API, a replay against a forwarded GET, and a forwarded create against one straight to
//! the API (`proxy-create`, `proxy-replay`, `proxy-direct`), and messages through
//! `idemkey-inbox` on JetStream or RabbitMQ against a plain consumer making the same write
//! (`inbox`, `--broker`).
//!
//! The files: `harness` what every workload runs on (the command line, the client, rounds
//! and workers, histograms, CPU times, reports, and the bounds against a hostile service);
//! `workloads` the pairs measured; `ctx` what a run's workloads share; `targets` every bar
//! a ratio is held to, in one table; `database` and `service` the database and the processes
//! the bench starts and removes (on `idemkey-test-support`); `run` one run from start to end.

mod ctx;
mod database;
mod harness;
mod run;
mod service;
mod targets;
mod workloads;

use std::process::ExitCode;

pub use harness::args::BenchArgs;

/// Runs the workloads, prints the tables, writes the JSON; exit 1 if a correctness check
/// (one note per key in the storm) failed. An error comes back as one printable line.
pub async fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    // The caller prints the error: escaped here, no message from below can reach the terminal
    // with a control character a hostile server put in it.
    run::bench(args)
        .await
        .map_err(|error| harness::printable::printable_error(&error))
}
