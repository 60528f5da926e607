//! The `idemkey` binary: `serve` runs the reference notes service, `proxy` puts idempotency
//! keys in front of any HTTP API, `sweep` and `forget` maintain the records, `check` tests
//! any API's idempotency keys from outside, `send` sends one request retried safely. What
//! idempotency costs is measured by the repository's `idemkey-bench`, which starts this binary.

mod args;
mod cli;
mod commands;

use std::process::ExitCode;

// glibc's allocator consolidates its free lists whenever a request frees and allocates buffers
// of a kilobyte or more, which every keyed request does (bodies, stored responses, Redis
// replies): mimalloc's per-thread pages avoid it (BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::Parser;
use clap::error::ErrorKind;

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(error) => {
            eprintln!("idemkey: error: {}", causes(&error));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes on one line, as `{:#}` would print them, but without a cause
/// whose message the one before already quotes: the stores' errors include their source in
/// their own message, so `{:#}` repeated it ("refused: refused: refused").
fn causes(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if line.contains(text.as_str()) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

fn run() -> anyhow::Result<ExitCode> {
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return Ok(usage(&error)),
    };
    if let Err(error) = cli.check() {
        return Ok(usage(&error));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let done = runtime.block_on(cli.command.run());
    // The command has finished, and with it what it waits for (a server's in-flight
    // requests): a library task that never yields must not keep the process from exiting.
    runtime.shutdown_timeout(SHUTDOWN_LIMIT);
    done
}

/// How long the runtime's remaining tasks get once the command has finished.
const SHUTDOWN_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Help and version go to stdout; a usage error is one line on stderr, exit 2.
fn usage(error: &clap::Error) -> ExitCode {
    if matches!(
        error.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
    ) {
        let _ = error.print();
        return ExitCode::SUCCESS;
    }
    if let Some(arg) = secret_arg(error) {
        // clap's message quotes the value, and a mistyped secret is still a secret.
        eprintln!(
            "idemkey: error: invalid value for '{arg}' (not shown): expected ACTOR=SECRET, both non-empty (try --help)"
        );
        return ExitCode::from(2);
    }
    eprintln!(
        "idemkey: {} (try --help)",
        one_line(&error.render().to_string())
    );
    ExitCode::from(2)
}

/// clap's message on one line: its first line, followed by the indented lines clap lists
/// beneath it (the arguments a `requires` is missing), which the first line alone announces
/// without naming.
fn one_line(rendered: &str) -> String {
    let mut lines = rendered.lines();
    let mut line = lines
        .next()
        .unwrap_or("invalid usage")
        .trim_end()
        .to_owned();
    let details: Vec<&str> = lines
        .take_while(|line| line.starts_with("  "))
        .map(str::trim)
        .collect();
    if !details.is_empty() {
        line.push(' ');
        line.push_str(&details.join(", "));
    }
    line
}

/// The argument of a value that failed validation, if that value may hold a secret.
fn secret_arg(error: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue};

    if error.kind() != ErrorKind::ValueValidation {
        return None;
    }
    match error.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(arg)) if arg.starts_with("--token") => Some(arg.clone()),
        _ => None,
    }
}
