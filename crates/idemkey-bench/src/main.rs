//! The `idemkey-bench` binary: parses [`idemkey_bench::BenchArgs`] and runs the workloads.
//!
//! Exit status: 0, 1 if the storm found a key with other than exactly one note, 2 on a usage
//! error (clap's), 1 with one line on stderr on any other error.

use std::process::ExitCode;

use clap::Parser;
use clap::error::ErrorKind;

/// Measure what idempotency costs: against a running service (--url) or the `idemkey serve`
/// (and `idemkey proxy`) it starts from the binary given with --idemkey.
///
/// Each workload alternates its two sides in short rounds on one server; prints tables and
/// the ratios against their targets. Exit status: 0, or 1 if the storm found a key with other
/// than exactly one note.
#[derive(Debug, Parser)]
#[command(name = "idemkey-bench", version)]
struct Cli {
    #[command(flatten)]
    args: idemkey_bench::BenchArgs,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return usage(&error),
    };
    let run = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(anyhow::Error::from)
        .and_then(|runtime| runtime.block_on(idemkey_bench::run(cli.args)));
    match run {
        Ok(code) => code,
        Err(error) => {
            eprintln!("idemkey-bench: error: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Help and version go to stdout; a usage error is one line on stderr, exit 2.
fn usage(error: &clap::Error) -> ExitCode {
    if matches!(
        error.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
    ) {
        let _ = error.print();
        return ExitCode::SUCCESS;
    }
    let rendered = error.render().to_string();
    let mut lines = rendered.lines();
    let first = lines.next().unwrap_or("invalid usage").trim_end();
    // clap lists a `requires`'s missing arguments on indented lines below the first.
    let details: Vec<&str> = lines
        .take_while(|line| line.starts_with("  "))
        .map(str::trim)
        .collect();
    eprintln!(
        "idemkey-bench: {first}{}{} (try --help)",
        if details.is_empty() { "" } else { " " },
        details.join(", ")
    );
    ExitCode::from(2)
}
