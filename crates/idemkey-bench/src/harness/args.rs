//! The `idemkey-bench` command line.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use idemkey_notes::Mode;
use idemkey_sqlx::Strategy;

use super::runner::Budget;
use crate::workloads::proxy::UpstreamKind;

/// What `idemkey-bench` measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Workload {
    /// Create with a fresh key against create without a key (same server, same handler).
    Create,
    /// Replay of one key against `GET /v1/notes/{id}`.
    Replay,
    /// Many clients on one key at a time: exactly one note per key, and the losers' latency.
    Storm,
    /// 90 % new keys, 10 % retries of recent keys.
    Mixed,
    /// Keyed create against the same two-row transaction run directly through sqlx.
    Ceiling,
    /// In-process: a router with the idempotency layer against the same router without it,
    /// on requests without a key.
    Layer,
    /// Keyed create through the client middleware (idemkey-reqwest) against plain reqwest
    /// setting the key itself: what the client half costs a client.
    Middleware,
    /// MySQL only: the statements the service sends for a keyed create against those of a
    /// key-less create, in the run's mode and strategy, through sqlx without HTTP.
    Statements,
    /// Through `idemkey proxy` (started by the bench, in front of a small API it runs
    /// itself, see --upstream): create with a fresh key against create without a key, which
    /// the proxy only forwards, and against the same straight to the API.
    ProxyCreate,
    /// Through `idemkey proxy`: a replay of one key against the `GET /v1/notes/{id}` of its
    /// note, which the proxy only forwards.
    ProxyReplay,
    /// Create without a key through `idemkey proxy` against the same straight to the API
    /// behind it: what forwarding costs.
    ProxyDirect,
    /// The store operations of a keyed create through `idemkey proxy` alone, in this
    /// process (lookup if the store looks first, claim, complete), against create without a
    /// key forwarded by the proxy: the highest keyed / forwarded ratio the store allows.
    ProxyStore,
    /// Messages through the inbox (idemkey-inbox) against a plain consumer doing the same
    /// write in its own transaction, and with the outbox against the plain consumer
    /// publishing after its commit, on the broker --broker names and the run's database.
    Inbox,
    /// All of the above.
    All,
}

impl Workload {
    /// The workloads `list` names, `all` expanded, in a fixed order; the default set if empty.
    pub(crate) fn expand(list: &[Self]) -> Vec<Self> {
        let every = [
            Self::Create,
            Self::Replay,
            Self::Storm,
            Self::Mixed,
            Self::Ceiling,
            Self::Layer,
            Self::Middleware,
            Self::Statements,
            Self::ProxyCreate,
            Self::ProxyReplay,
            Self::ProxyDirect,
            Self::ProxyStore,
            Self::Inbox,
        ];
        if list.is_empty() {
            return every[..4].to_vec();
        }
        let all = list.contains(&Self::All);
        every
            .into_iter()
            .filter(|w| all || list.contains(w))
            .collect()
    }

    /// Whether it sends HTTP requests to the notes service.
    pub(crate) fn needs_service(self) -> bool {
        !self.is_proxy()
            && !matches!(
                self,
                Self::Layer | Self::Statements | Self::Inbox | Self::All
            )
    }

    /// Whether it measures `idemkey proxy` (and needs neither the notes service nor its
    /// database).
    pub(crate) fn is_proxy(self) -> bool {
        matches!(
            self,
            Self::ProxyCreate | Self::ProxyReplay | Self::ProxyDirect | Self::ProxyStore
        )
    }
}

/// Arguments of `idemkey-bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// The `idemkey` binary whose `serve` and `proxy` the bench starts, e.g.
    /// `target/release/idemkey`. Not needed with --url, unless a proxy workload runs.
    #[arg(long, value_name = "PATH", env = "IDEMKEY_BIN")]
    pub(crate) idemkey: Option<PathBuf>,
    /// Workloads to run (default: create replay storm mixed).
    #[arg(value_enum, value_name = "WORKLOAD")]
    pub(crate) workloads: Vec<Workload>,
    /// A running service's base URL (http://HOST:PORT); default: start `idemkey serve`.
    /// Keyed and key-less creates must both be accepted (`--optional-key`).
    #[arg(long, requires = "token")]
    pub(crate) url: Option<String>,
    /// The running service's bearer token (with --url).
    #[arg(long, env = "IDEMKEY_BENCH_TOKEN", hide_env_values = true)]
    pub(crate) token: Option<String>,
    /// The database: `sqlite://FILE`, `postgres://...` (a fresh schema is made in it and
    /// dropped at the end) or `mysql://...` (a fresh database on that server, dropped at the
    /// end). Default: a new SQLite file in a temporary directory. With --url, the service's
    /// own database, used as it is (for `ceiling`, `layer` and `statements`). The proxy
    /// workloads keep the proxy's records in a fresh one of the same kind (a file of their
    /// own for SQLite), or in Redis with `redis://...` (proxy workloads only; their records
    /// then expire 10 minutes after the run, under a credential of the run's own).
    #[arg(long)]
    pub(crate) database_url: Option<String>,
    /// The APIs behind the proxy in the proxy workloads, each in turn with a proxy of its
    /// own, comma-separated: memory (notes in memory), sqlite-normal (a row per create in a
    /// SQLite file, WAL, synchronous = NORMAL), sqlite-full (the same, synchronous = FULL).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "memory",
        value_name = "API"
    )]
    pub(crate) upstream: Vec<UpstreamKind>,
    /// The mode of the service the bench starts: atomic or lease.
    #[arg(long, default_value = "atomic")]
    pub(crate) mode: Mode,
    /// Atomic mode's strategy in the service the bench starts: commit-time or claim-first.
    #[arg(long, default_value = "commit-time")]
    pub(crate) strategy: Strategy,
    /// The service the bench starts skips atomic mode's lookup before the write transaction.
    #[arg(long)]
    pub(crate) no_lookup: bool,
    /// The service the bench starts completes lease-mode records in a transaction of their
    /// own (`idemkey serve --separate-completion`).
    #[arg(long)]
    pub(crate) separate_completion: bool,
    /// The service the bench starts keeps completed records in memory this long
    /// (`idemkey serve --replay-cache`), e.g. `1s`.
    #[arg(long, value_name = "TTL")]
    pub(crate) replay_cache: Option<String>,
    /// The service the bench starts keeps its records in Redis (`idemkey serve
    /// --records-url`, lease mode only), e.g. `redis://127.0.0.1:6379`.
    #[arg(long, value_name = "URL")]
    pub(crate) records_url: Option<String>,
    /// With --records-url: the service waits for this many Redis replicas after each
    /// completion (`idemkey serve --records-wait-replicas`).
    #[arg(long, value_name = "N", requires = "records_url")]
    pub(crate) records_wait_replicas: Option<u32>,
    /// With --records-url: the service waits for Redis's fsync after each completion
    /// (`idemkey serve --records-wait-fsync`).
    #[arg(long, requires = "records_url")]
    pub(crate) records_wait_fsync: bool,
    /// With --records-url: the service keeps no completed records in memory (`idemkey serve
    /// --no-replay-cache`).
    #[arg(long, requires = "records_url")]
    pub(crate) no_replay_cache: bool,
    /// How long each side of each workload runs, e.g. `10s` (default 10s).
    #[arg(long, value_parser = parse_duration, conflicts_with = "requests")]
    pub(crate) duration: Option<Duration>,
    /// How many requests each side of each workload sends, instead of a duration.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) requests: Option<u64>,
    /// Clients sending at once, each on its own keep-alive connection.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub(crate) concurrency: u32,
    /// Each side's budget is split into this many rounds, alternating with the other side's.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub(crate) rounds: u32,
    /// Clients racing on each key in the storm.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(2..=1024))]
    pub(crate) storm_clients: u32,
    /// The broker of the `inbox` workload: nats://HOST:PORT (JetStream) or
    /// amqp://USER:PASS@HOST:PORT (RabbitMQ).
    #[arg(long, default_value = "nats://127.0.0.1:4222", value_name = "URL")]
    pub(crate) broker: String,
    /// Also write the results as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub(crate) json: Option<PathBuf>,
}

impl BenchArgs {
    /// Each side's budget.
    pub(crate) fn budget(&self) -> Budget {
        match (self.requests, self.duration) {
            (Some(n), _) => Budget::Requests(n),
            (None, Some(time)) => Budget::Time(time),
            (None, None) => Budget::Time(Duration::from_secs(10)),
        }
    }

    /// The APIs behind the proxy, each once, in the order given.
    pub(crate) fn upstreams(&self) -> Vec<UpstreamKind> {
        let mut upstreams = self.upstream.clone();
        let mut seen = Vec::new();
        upstreams.retain(|kind| {
            let first = !seen.contains(kind);
            seen.push(*kind);
            first
        });
        upstreams
    }

    /// Atomic mode's strategy and lookup, for the service the bench starts.
    pub(crate) fn serve_flags(&self) -> Vec<String> {
        let mut flags = vec!["--strategy".to_owned(), self.strategy.to_string()];
        if self.no_lookup {
            flags.push("--no-lookup".to_owned());
        }
        if self.separate_completion {
            flags.push("--separate-completion".to_owned());
        }
        if let Some(ttl) = &self.replay_cache {
            flags.extend(["--replay-cache".to_owned(), ttl.clone()]);
        }
        if let Some(url) = &self.records_url {
            flags.extend(["--records-url".to_owned(), url.clone()]);
        }
        if let Some(replicas) = self.records_wait_replicas {
            flags.extend(["--records-wait-replicas".to_owned(), replicas.to_string()]);
        }
        if self.records_wait_fsync {
            flags.push("--records-wait-fsync".to_owned());
        }
        if self.no_replay_cache {
            flags.push("--no-replay-cache".to_owned());
        }
        flags
    }

    /// The replay cache's flags, for the proxy the bench starts.
    pub(crate) fn proxy_flags(&self) -> Vec<String> {
        let mut flags = Vec::new();
        if let Some(ttl) = &self.replay_cache {
            flags.extend(["--replay-cache".to_owned(), ttl.clone()]);
        }
        if self.no_replay_cache {
            flags.push("--no-replay-cache".to_owned());
        }
        flags
    }
}

fn parse_duration(value: &str) -> Result<Duration, String> {
    match humantime::parse_duration(value) {
        Ok(duration) if duration >= Duration::from_millis(10) => Ok(duration),
        Ok(_) => Err("duration must be at least 10ms".to_owned()),
        Err(error) => Err(format!("{error} (examples: 10s, 2m)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workloads_expand_in_order() {
        use Workload::*;
        assert_eq!(Workload::expand(&[]), vec![Create, Replay, Storm, Mixed]);
        assert_eq!(Workload::expand(&[Layer, Create]), vec![Create, Layer]);
        assert_eq!(Workload::expand(&[All]).len(), 13);
        assert_eq!(
            Workload::expand(&[ProxyDirect, Create, ProxyCreate]),
            vec![Create, ProxyCreate, ProxyDirect]
        );
        assert!(ProxyReplay.is_proxy() && !ProxyReplay.needs_service());
        assert!(parse_duration("5ms").is_err() && parse_duration("2s").is_ok());
    }
}
