//! The command line: the commands, each parsed by its module's arguments and run there.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::args::DatabaseArgs;
use crate::commands::maintenance::{self, ForgetArgs};
use crate::commands::proxy::{self, ProxyArgs};
use crate::commands::send::{self, SendArgs};
use crate::commands::serve::{self, ServeArgs};

/// Idempotency keys for HTTP APIs: the reference service and its tools.
#[derive(Debug, Parser)]
#[command(name = "idemkey", version, about)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run the reference notes service.
    Serve(ServeArgs),
    /// Delete expired idempotency records, in bounded batches.
    Sweep(DatabaseArgs),
    /// Delete one idempotency record, so that its key executes again, or every completed
    /// record of an actor (`--actor` alone, or a proxy client's `--proxy-credential`).
    Forget(ForgetArgs),
    /// Check any API's idempotency keys from outside: retries, concurrency, mismatches.
    ///
    /// Exit status: 0 no case failed, 1 a case failed, 2 usage or connection error.
    Check(idemkey_check::CheckArgs),
    /// Put idempotency keys in front of any HTTP API: a reverse proxy in lease mode.
    ///
    /// The first line on stdout names the proxy's address and its admin address
    /// (`/healthz`, `/metrics`).
    Proxy(ProxyArgs),
    /// Send one HTTP request, retried safely: one Idempotency-Key on every attempt.
    ///
    /// curl-like, for scripts: stdout is the final answer's body; stderr names the key
    /// (`idemkey: key KEY`) before the first attempt, so the command can be run again with
    /// --key. The URL's server is taken to honour keys (you named it): a lost answer is
    /// retried under the key. Redirects are not followed.
    #[command(after_help = "Exit status:\n  \
        0  the final answer is a 2xx\n  \
        1  the final answer is another status (its body is on stdout)\n  \
        2  a usage error: nothing was sent\n  \
        3  no final answer within the limits: the outcome is unknown; stderr says how to \
        run again under the same key")]
    Send(SendArgs),
}

impl Cli {
    /// What clap cannot check (see [`ServeArgs::conflict`]).
    pub(crate) fn check(&self) -> Result<(), clap::Error> {
        let Command::Serve(args) = &self.command else {
            return Ok(());
        };
        let Some(conflict) = args.conflict() else {
            return Ok(());
        };
        use clap::CommandFactory;
        Err(Self::command().error(clap::error::ErrorKind::ArgumentConflict, conflict))
    }
}

impl Command {
    pub(crate) async fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            Self::Serve(args) => serve::run(args).await,
            Self::Sweep(args) => maintenance::sweep(args).await,
            Self::Forget(args) => maintenance::forget(args).await,
            Self::Check(args) => Ok(idemkey_check::run(args).await.into()),
            Self::Proxy(args) => proxy::run(args).await,
            Self::Send(args) => Ok(send::run(args).await),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
