//! What every workload of a run shares ([`Ctx`]), and which row of the bars
//! ([`crate::targets`]) applies to the run's service.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use anyhow::Context;
use idemkey_notes::Mode;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::harness::runner::Budget;
use crate::targets::Id;

/// The error of a run that would start `idemkey` without being given it.
pub(crate) const NO_IDEMKEY: &str = "the bench starts `idemkey serve` and `idemkey proxy`: give the binary \
     with --idemkey PATH (e.g. target/release/idemkey) or IDEMKEY_BIN, or measure a running \
     service with --url";

/// What every workload of a run shares.
#[derive(Clone)]
pub(crate) struct Ctx {
    pub(crate) budget: Budget,
    pub(crate) rounds: u32,
    pub(crate) concurrency: usize,
    /// Makes keys and titles unique to this run.
    pub(crate) prefix: String,
    pub(crate) mode: Mode,
    /// The flags the started service gets beyond its mode.
    pub(crate) serve_flags: Vec<String>,
    /// The database, for the workloads that use it directly.
    pub(crate) database_url: Option<String>,
    /// Where the proxy workloads' proxy keeps its records.
    pub(crate) proxy_database_url: Option<String>,
    /// The `idemkey` binary the bench starts as the service and the proxy.
    pub(crate) idemkey: Option<PathBuf>,
}

impl Ctx {
    /// The bar of keyed / key-less create, by mode and database; none for a service
    /// measured from outside (`--url` without `--database-url`), whose database is unknown.
    pub(crate) fn create_bar(&self) -> Option<Id> {
        if self.redis_records() {
            return Some(Id::CreateRedisRecords);
        }
        let sqlite = self.database_url.as_deref()?.starts_with("sqlite");
        Some(match (self.mode, sqlite) {
            (Mode::Lease, true) => Id::CreateLeaseSqlite,
            (Mode::Lease, false) => Id::CreateLeaseServer,
            (Mode::Atomic, false) => Id::CreateAtomicServer,
            (Mode::Atomic, true) => Id::CreateAtomicSqlite,
        })
    }

    /// The bar of replay / GET: with the replay cache, in lease mode or with the records in
    /// Redis, or in atomic mode.
    pub(crate) fn replay_bar(&self) -> Id {
        if self.serve_flags.iter().any(|flag| flag == "--replay-cache") {
            Id::ReplayCached
        } else if self.redis_records() || self.mode == Mode::Lease {
            Id::ReplayLeaseOrRedis
        } else {
            Id::ReplayAtomic
        }
    }

    /// The bar of the proxy's keyed create / forwarded key-less create, by where the proxy
    /// keeps its records.
    pub(crate) fn proxy_create_bar(&self) -> Id {
        match self.proxy_database_url.as_deref() {
            Some(url) if url.starts_with("redis") => Id::ProxyCreateRedis,
            Some(url) if url.starts_with("sqlite") => Id::ProxyCreateSqlite,
            _ => Id::ProxyCreateServer,
        }
    }

    /// Whether the started service keeps its records in Redis (`--records-url`).
    fn redis_records(&self) -> bool {
        self.serve_flags.iter().any(|flag| flag == "--records-url")
    }

    /// The `idemkey` binary to start; an error saying how to give it if none was.
    pub(crate) fn idemkey(&self) -> anyhow::Result<&Path> {
        self.idemkey.as_deref().context(NO_IDEMKEY)
    }

    /// A progress bar of `len` steps on stderr, hidden when stderr is not a terminal.
    pub(crate) fn bar(&self, name: &str, len: u32) -> ProgressBar {
        let target = if std::io::stderr().is_terminal() {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = ProgressBar::with_draw_target(Some(u64::from(len)), target);
        let style =
            ProgressStyle::with_template("{prefix:>8} {bar:30} {pos}/{len} rounds {elapsed}")
                .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        bar.set_prefix(name.to_owned());
        bar
    }
}
