//! The runner of the workspace's `harness = false` test binaries: every
//! `#[idemkey_test_support::test]` of the binary becomes a libtest-mimic trial, so cargo
//! counts a test whose [`Need`] is missing as *ignored*, with the reason, never as passed.
//! With `CI` set nothing is ignored: such a test runs and fails, saying what is missing.
//!
//! A binary's `main.rs` ends with `fn main() -> std::process::ExitCode { trials::main() }`.
//! libtest's arguments work as with libtest: filters, `--exact`, `--skip`, `--list`,
//! `--ignored` and `--include-ignored` (which run the ignored tests, so they fail where their
//! need is missing), `--test-threads`. Output is never captured, as if `--nocapture` were given.

use std::future::Future;
use std::pin::Pin;
use std::process::ExitCode;

use libtest_mimic::{Arguments, Completion, Failed, Trial};

pub use crate::runner::needs::Need;

/// Every test of this binary, registered by `#[idemkey_test_support::test]`.
#[linkme::distributed_slice]
pub static TESTS: [Test];

/// A registered test. Written by `#[idemkey_test_support::test]`, not by hand.
pub struct Test {
    /// `module_path!()::name`: the binary's crate name, then the path libtest would show.
    pub path: &'static str,
    /// What the test needs beyond the workspace.
    pub needs: &'static [Need],
    /// `#[ignore]`d, with the reason given (if any): run only when asked, as with libtest.
    pub ignored: Option<&'static str>,
    /// The test function.
    pub body: Body,
}

/// A test function.
pub enum Body {
    /// A `fn`, run on the trial's thread.
    Sync(fn()),
    /// An `async fn`, run to completion on a runtime of its own.
    Async {
        /// The runtime it runs on.
        runtime: Runtime,
        /// Calls the function.
        run: fn() -> Pin<Box<dyn Future<Output = ()>>>,
    },
}

/// The runtime of an async test, as `tokio::test`'s `flavor` and `worker_threads` say.
#[derive(Clone, Copy, Debug)]
pub enum Runtime {
    /// `flavor = "current_thread"`, the default.
    CurrentThread,
    /// `flavor = "multi_thread"`, with `worker_threads` if given.
    MultiThread {
        /// The number of worker threads; tokio's default when `None`.
        workers: Option<usize>,
    },
}

/// What the runner does with a test.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Run it.
    Run,
    /// Count it as ignored, for this reason.
    Ignore(String),
}

/// Whether the `CI` variable's value says this is CI: set, and neither empty nor `false` or
/// `0` (as CI services and tools read it), so `CI=false` runs a developer's suite with its
/// ignores.
pub fn in_ci(value: Option<&str>) -> bool {
    value.is_some_and(|value| {
        let value = value.trim();
        !(value.is_empty() || value == "0" || value.eq_ignore_ascii_case("false"))
    })
}

/// The decision: a test whose needs are met runs; one with a need missing is ignored, with
/// the reasons, unless `in_ci`, where it must run (and fails, saying what is missing).
pub fn decide(missing: &[&str], in_ci: bool) -> Verdict {
    if missing.is_empty() || in_ci {
        Verdict::Run
    } else {
        Verdict::Ignore(missing.join("; "))
    }
}

impl Test {
    /// The name libtest would give it: its module path inside the binary, then its name.
    pub fn name(&self) -> &'static str {
        self.path
            .split_once("::")
            .map_or(self.path, |(_, name)| name)
    }

    /// What the runner does with this test here and now (needs probed once per process).
    pub fn verdict(&self) -> Verdict {
        let missing: Vec<&str> = self
            .needs
            .iter()
            .filter_map(|need| need.missing())
            .collect();
        decide(&missing, in_ci(std::env::var("CI").ok().as_deref()))
    }

    /// Runs the test; a panic in it propagates, and is the trial's failure.
    pub fn run(&self) -> Result<(), Failed> {
        match self.body {
            Body::Sync(test) => test(),
            Body::Async { runtime, run } => {
                let runtime = build(runtime).map_err(|e| format!("no tokio runtime: {e}"))?;
                runtime.block_on(run());
            }
        }
        Ok(())
    }
}

fn build(runtime: Runtime) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = match runtime {
        Runtime::CurrentThread => tokio::runtime::Builder::new_current_thread(),
        Runtime::MultiThread { workers } => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            if let Some(workers) = workers {
                builder.worker_threads(workers);
            }
            builder
        }
    };
    builder.enable_all().build()
}

/// The trial of `test`. An ignored test is ignored when it would run, with its reason shown;
/// but when `--ignored` or `--include-ignored` asked for the ignored tests, it must be marked
/// ignored beforehand, for libtest-mimic to select it, and it then runs.
fn trial(test: &'static Test, run_ignored: bool) -> Trial {
    if let Some(reason) = test.ignored {
        if run_ignored {
            return Trial::test(test.name(), || test.run()).with_ignored_flag(true);
        }
        // Reported as ignored with the attribute's reason, as libtest shows it.
        return Trial::ignorable_test(test.name(), move || {
            Ok(if reason.is_empty() {
                Completion::ignored()
            } else {
                Completion::ignored_with(reason)
            })
        });
    }
    if run_ignored {
        let ignored = test.verdict() != Verdict::Run;
        return Trial::test(test.name(), || test.run()).with_ignored_flag(ignored);
    }
    Trial::ignorable_test(test.name(), || match test.verdict() {
        Verdict::Run => test.run().map(|()| Completion::Completed),
        Verdict::Ignore(reason) => Ok(Completion::ignored_with(reason)),
    })
}

/// Runs this binary's tests as libtest would, with the arguments it was given.
pub fn main() -> ExitCode {
    let args = Arguments::from_args();
    let run_ignored = args.ignored || args.include_ignored;
    let mut tests: Vec<&'static Test> = TESTS.iter().collect();
    // libtest's order: by name.
    tests.sort_by_key(|test| test.name());
    let trials = tests
        .into_iter()
        .map(|test| trial(test, run_ignored))
        .collect();
    libtest_mimic::run(&args, trials).exit_code()
}

#[cfg(test)]
mod tests {
    use super::{Verdict, decide, in_ci};

    const NO_PG: &str = "no PostgreSQL";

    #[test]
    fn a_test_whose_needs_are_met_runs_in_and_out_of_ci() {
        assert_eq!(decide(&[], false), Verdict::Run);
        assert_eq!(decide(&[], true), Verdict::Run);
    }

    #[test]
    fn a_missing_need_is_ignored_with_its_reason_outside_ci() {
        assert_eq!(decide(&[NO_PG], false), Verdict::Ignore(NO_PG.to_owned()));
        let both = decide(&[NO_PG, "no Redis"], false);
        assert_eq!(both, Verdict::Ignore("no PostgreSQL; no Redis".to_owned()));
    }

    #[test]
    fn ci_is_a_set_variable_that_does_not_say_false() {
        for yes in ["true", "1", "yes", "github-actions"] {
            assert!(in_ci(Some(yes)), "{yes}");
        }
        for no in [
            None,
            Some(""),
            Some("false"),
            Some("FALSE"),
            Some("0"),
            Some(" false "),
        ] {
            assert!(!in_ci(no), "{no:?}");
        }
    }

    #[test]
    fn a_missing_need_runs_in_ci_to_fail_there() {
        assert_eq!(decide(&[NO_PG], true), Verdict::Run);
    }
}
