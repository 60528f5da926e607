//! The command line.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use idemkey_notes::Mode;
use idemkey_sqlx::Strategy;

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
    Proxy(crate::proxy::ProxyArgs),
    /// Send one HTTP request, retried safely: one Idempotency-Key on every attempt.
    ///
    /// curl-like, for scripts: stdout is the final answer's body; stderr names the key
    /// (`idemkey: key KEY`) before the first attempt, so the command can be run again with
    /// --key. Exit status: 0 final 2xx, 1 another final status, 2 usage error or no final
    /// answer.
    Send(crate::send::SendArgs),
}

impl Cli {
    /// What clap cannot check: atomic mode's records must commit with the notes, so they
    /// cannot live in Redis (behaviour [§13](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#13-the-reference-notes-service)).
    pub(crate) fn check(&self) -> Result<(), clap::Error> {
        let Command::Serve(args) = &self.command else {
            return Ok(());
        };
        if args.database.records_url.is_none() {
            return Ok(());
        }
        let conflict = if args.mode == Mode::Atomic {
            "--records-url needs --mode lease: atomic mode commits its records with the notes, in --database-url"
        } else if args.replay_cache.is_some() {
            "--replay-cache is for records in --database-url: with --records-url redis://, replays are cached by default, kept exact by Redis (--no-replay-cache turns that off)"
        } else if !args.actor_caps().is_unlimited() {
            "per-actor caps are not supported with --records-url yet"
        } else {
            return Ok(());
        };
        use clap::CommandFactory;
        Err(Self::command().error(clap::error::ErrorKind::ArgumentConflict, conflict))
    }
}

impl Command {
    pub(crate) async fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            Self::Serve(args) => crate::serve::run(args).await,
            Self::Sweep(args) => crate::maintenance::sweep(args).await,
            Self::Forget(args) => crate::maintenance::forget(args).await,
            Self::Check(args) => Ok(idemkey_check::run(args).await.into()),
            Self::Proxy(args) => crate::proxy::run(args).await,
            Self::Send(args) => Ok(crate::send::run(args).await),
        }
    }
}

/// Where the records are.
#[derive(Debug, Args)]
pub(crate) struct DatabaseArgs {
    /// `sqlite://FILE`, `postgres://...` or `mysql://...` (MySQL 8 or MariaDB).
    #[arg(
        long,
        env = "IDEMKEY_DATABASE_URL",
        hide_env_values = true,
        default_value = "sqlite://idemkey.db"
    )]
    pub(crate) database_url: String,
    /// Lease mode: keep the idempotency records in Redis or Valkey (`redis://HOST:PORT[/DB]`,
    /// `redis+cluster://H1:P1,H2:P2`) instead of the database (docs/redis.md).
    #[arg(
        long,
        env = "IDEMKEY_RECORDS_URL",
        hide_env_values = true,
        value_name = "URL"
    )]
    pub(crate) records_url: Option<String>,
    /// With --records-url: each stored response waits until this many Redis replicas have
    /// it (`WAIT`, at most 1 s), so a failover keeps it. Standalone servers only.
    #[arg(long, env = "IDEMKEY_RECORDS_WAIT_REPLICAS", value_name = "N", requires = "records_url",
        value_parser = clap::value_parser!(u32).range(1..), hide_short_help = true)]
    pub(crate) records_wait_replicas: Option<u32>,
    /// With --records-url: each stored response waits until Redis has fsynced it to its
    /// append-only file (`WAITAOF`, Redis 7.2+ or Valkey, `appendonly yes`; at most 1 s), so
    /// a server crash cannot lose it. With --records-wait-replicas, the replicas' files too.
    #[arg(
        long,
        env = "IDEMKEY_RECORDS_WAIT_FSYNC",
        requires = "records_url",
        hide_short_help = true
    )]
    pub(crate) records_wait_fsync: bool,
    /// With --records-url rediss://: trust only this CA certificate (a PEM file) for the
    /// server's certificate, instead of the system's roots.
    #[arg(
        long,
        env = "IDEMKEY_RECORDS_TLS_CA",
        value_name = "FILE",
        requires = "records_url"
    )]
    pub(crate) records_tls_ca: Option<std::path::PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// The address to listen on (port 0 picks a free one; the address is printed).
    #[arg(long, env = "IDEMKEY_LISTEN", default_value = "127.0.0.1:8080")]
    pub(crate) listen: SocketAddr,
    #[command(flatten)]
    pub(crate) database: DatabaseArgs,
    /// A bearer token, as ACTOR=SECRET; repeatable. Without any, a token for actor `demo`
    /// is made up and printed.
    #[arg(long = "token", env = "IDEMKEY_TOKENS", hide_env_values = true, value_delimiter = ',',
        value_parser = parse_token)]
    pub(crate) tokens: Vec<(String, String)>,
    /// How long completed records are kept, e.g. `24h`, `90m`.
    #[arg(long, env = "IDEMKEY_RETENTION", default_value = "24h", value_parser = parse_retention)]
    pub(crate) retention: Duration,
    /// `atomic` (the record commits with the note) or `lease`.
    #[arg(long, env = "IDEMKEY_MODE", default_value = "atomic")]
    pub(crate) mode: Mode,
    /// Atomic mode: `commit-time` (the record is written, completed, as the transaction's
    /// last statement; a concurrent duplicate from another instance runs speculatively and
    /// rolls back) or `claim-first` (the record is claimed first; duplicates wait at the claim).
    /// The notes' handler is a light insert, so commit-time is this command's default; the
    /// library's `AtomicIdempotencyLayer` claims first unless told otherwise.
    #[arg(long, env = "IDEMKEY_STRATEGY", default_value = "commit-time")]
    pub(crate) strategy: Strategy,
    /// Advanced (atomic mode): skip the read-only lookup before the write transaction, the
    /// default on MySQL and MariaDB. Saves a statement and a round trip on each first
    /// request; a retry then runs the handler, rolled back, before its replay.
    #[arg(
        long,
        env = "IDEMKEY_NO_LOOKUP",
        hide_short_help = true,
        conflicts_with = "lookup"
    )]
    pub(crate) no_lookup: bool,
    /// Advanced (atomic mode): read the record before the write transaction, the default on
    /// SQLite and PostgreSQL. A retry of a completed request is then replayed without
    /// running the handler.
    #[arg(long, env = "IDEMKEY_LOOKUP", hide_short_help = true)]
    pub(crate) lookup: bool,
    /// Advanced (lease mode, records in the notes' database): complete the record in a
    /// transaction of its own after the note's, instead of as its last statement. One
    /// commit more; kept for comparison.
    #[arg(long, env = "IDEMKEY_SEPARATE_COMPLETION", hide_short_help = true)]
    pub(crate) separate_completion: bool,
    /// Keep completed records in memory for this long (e.g. `1s`), so replays of a hot key
    /// skip the database (at most 64 MiB). Off by default: a `forget` by another process,
    /// and a record's expiry, reach this instance only after this long.
    #[arg(long, env = "IDEMKEY_REPLAY_CACHE", value_name = "TTL", value_parser = parse_cache_ttl)]
    pub(crate) replay_cache: Option<Duration>,
    /// With --records-url redis://: do not keep completed records in memory. On by default
    /// there (standalone servers), because Redis tells this process at once when a record it
    /// holds changes (`CLIENT TRACKING`), so no copy outlives its record.
    #[arg(
        long,
        env = "IDEMKEY_NO_REPLAY_CACHE",
        requires = "records_url",
        hide_short_help = true
    )]
    pub(crate) no_replay_cache: bool,
    /// Run requests without an Idempotency-Key too, unrecorded.
    #[arg(long, env = "IDEMKEY_OPTIONAL_KEY")]
    pub(crate) optional_key: bool,
    /// Where your API documents its problem types: each problem's `type` is this URL followed
    /// by its slug (`key-reused`). Unset, it is idemkey's own page, a section per slug:
    /// https://docs.rs/idemkey/latest/idemkey/problems/index.html#
    #[arg(long, env = "IDEMKEY_PROBLEM_BASE", value_name = "URL")]
    pub(crate) problem_base: Option<String>,
    /// The secret behind derived keys. Unset, the store's own is used: made once and kept in
    /// the database, so the same for every instance and restart.
    #[arg(long, env = "IDEMKEY_SECRET", hide_env_values = true, value_parser = parse_secret)]
    pub(crate) secret: Option<String>,
    #[command(flatten)]
    pub(crate) connections: ConnectionArgs,
    /// Most live idempotency records one actor may hold; a request that would create one
    /// more is answered 429 `actor-cap-reached`, not executed. Unlimited by default.
    #[arg(long, env = "IDEMKEY_MAX_RECORDS_PER_ACTOR", value_name = "N",
        value_parser = clap::value_parser!(u64).range(1..), hide_short_help = true)]
    pub(crate) max_records_per_actor: Option<u64>,
    /// Most bytes of stored responses one actor may hold (`64MiB`, `500KiB`, `1000000`);
    /// past it, new keys are answered 429 `actor-cap-reached`. Unlimited by default.
    #[arg(long, env = "IDEMKEY_MAX_BYTES_PER_ACTOR", value_name = "SIZE",
        value_parser = parse_size, hide_short_help = true)]
    pub(crate) max_bytes_per_actor: Option<u64>,
    /// Advanced (lease mode): how long a claim holds its key, renewed while the handler runs;
    /// a claim whose process died blocks retries (409) this long, e.g. `30s`, `1500ms`.
    #[arg(long, env = "IDEMKEY_LEASE", default_value = "30s", value_parser = parse_lease,
        hide_short_help = true)]
    pub(crate) lease: Duration,
    /// Advanced (lease mode): the process writes a heartbeat every quarter of this; once it
    /// is this old, the process's claims may be taken over, so a retry of a request whose
    /// process died is executed after about this long, not after the lease. A live process
    /// stalled longer loses its claims. `off`: the lease alone. E.g. `2s`, `500ms`.
    #[arg(long, env = "IDEMKEY_OWNER_GRACE", default_value = "1s", value_parser = parse_owner_grace,
        hide_short_help = true)]
    pub(crate) owner_grace: OwnerGrace,
}

/// The `--owner-grace` of `serve` and `proxy`: a grace, or `off`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OwnerGrace(pub(crate) Option<Duration>);

#[derive(Debug, Args)]
pub(crate) struct ForgetArgs {
    #[command(flatten)]
    pub(crate) database: DatabaseArgs,
    /// The actor, as stored. With --operation and --key, only that record; without them,
    /// every completed record of the actor, whatever its operation and key (its records
    /// still in flight or released for a retry hold no response and are kept; the count of
    /// each is printed).
    #[arg(long, required_unless_present = "proxy_credential")]
    pub(crate) actor: Option<String>,
    /// The operation's name, or NAME:VERSION (`create-note:v1`): the whole value is tried as
    /// a name first, then the name before the last colon, only if that version wrote its
    /// record.
    #[arg(long, requires = "key")]
    pub(crate) operation: Option<String>,
    /// The idempotency key, bare or quoted.
    #[arg(long, requires = "operation")]
    pub(crate) key: Option<String>,
    /// Instead of --actor: the actor `idemkey proxy` gives this credential, as a client sends
    /// it (`'Authorization: Bearer T'`), or `-` to read that line from stdin. Its digests are
    /// computed as the proxy computes them (and the one of earlier versions); the credential
    /// is never printed.
    #[arg(long, value_name = "'HEADER: VALUE'", conflicts_with = "actor",
        value_parser = |value: &str| Ok::<_, std::convert::Infallible>(Hidden(value.to_owned())))]
    pub(crate) proxy_credential: Option<Hidden>,
    /// With --proxy-credential: the proxy's --config file, for its `[actor]` settings (by
    /// default the actor is the `Authorization` header's).
    #[arg(long, value_name = "FILE", requires = "proxy_credential")]
    pub(crate) config: Option<std::path::PathBuf>,
    /// With --proxy-credential: a file holding the proxy's --secret, if it runs with one (its
    /// final line ending is not part of it). Unset: IDEMKEY_SECRET, else the store's own.
    #[arg(long, value_name = "FILE", requires = "proxy_credential")]
    pub(crate) secret_file: Option<std::path::PathBuf>,
    /// The proxy's --secret, from the environment only (IDEMKEY_SECRET).
    #[arg(long, env = "IDEMKEY_SECRET", hide = true, hide_env_values = true,
        value_parser = |value: &str| parse_secret(value).map(Hidden))]
    pub(crate) secret: Option<Hidden>,
}

/// A value that may be a credential or a secret: never shown by `Debug`.
#[derive(Clone)]
pub(crate) struct Hidden(pub(crate) String);

impl std::fmt::Debug for Hidden {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hidden(..)")
    }
}

pub(crate) fn parse_secret(value: &str) -> Result<String, String> {
    if value.is_empty() {
        return Err("the secret must not be empty".into());
    }
    Ok(value.to_owned())
}

fn parse_token(value: &str) -> Result<(String, String), String> {
    match value.split_once('=') {
        Some((actor, secret)) if !actor.trim().is_empty() && !secret.trim().is_empty() => {
            Ok((actor.trim().to_owned(), secret.trim().to_owned()))
        }
        // The value is not echoed: it may be a secret with a typo.
        _ => Err("expected ACTOR=SECRET, both non-empty".to_owned()),
    }
}

/// Bounds on clients' connections, shared by `serve` and `proxy`.
#[derive(Debug, Args)]
pub(crate) struct ConnectionArgs {
    /// How long a client may take to send a request's headers, also the longest a
    /// keep-alive connection stays idle, e.g. `10s`.
    #[arg(long, env = "IDEMKEY_HEADER_TIMEOUT", default_value = "10s", value_parser = parse_timeout,
        hide_short_help = true)]
    pub(crate) header_timeout: Duration,
    /// How long a request body may go without sending a byte, e.g. `10s`.
    #[arg(long, env = "IDEMKEY_BODY_TIMEOUT", default_value = "10s", value_parser = parse_timeout,
        hide_short_help = true)]
    pub(crate) body_timeout: Duration,
    /// How long a whole request body may take from the end of its headers, however steadily
    /// it trickles; past it the request is answered 408 and its connection closed, e.g. `60s`.
    #[arg(long, env = "IDEMKEY_BODY_DEADLINE", default_value = "60s",
        value_parser = parse_body_deadline, hide_short_help = true)]
    pub(crate) body_deadline: Duration,
    /// Connections open at once; more wait to be accepted.
    #[arg(long, env = "IDEMKEY_MAX_CONNECTIONS", default_value_t = 1024,
        value_parser = clap::value_parser!(u32).range(1..=1_000_000), hide_short_help = true)]
    pub(crate) max_connections: u32,
}

impl ConnectionArgs {
    /// The bounds on clients' connections.
    pub(crate) fn limits(&self) -> idemkey_server::Limits {
        idemkey_server::Limits::default()
            .header_read_timeout(self.header_timeout)
            .body_timeout(self.body_timeout)
            .body_deadline(self.body_deadline)
            .max_connections(usize::try_from(self.max_connections).unwrap_or(usize::MAX))
    }
}

impl ServeArgs {
    /// The per-actor caps (behaviour [§11](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#11-security)).
    pub(crate) fn actor_caps(&self) -> idemkey_core::ActorCaps {
        let mut caps = idemkey_core::ActorCaps::new();
        if let Some(records) = self.max_records_per_actor {
            caps = caps.max_records(records);
        }
        if let Some(bytes) = self.max_bytes_per_actor {
            caps = caps.max_bytes(bytes);
        }
        caps
    }
}

/// A size in bytes: a whole number, optionally with a binary unit (`KiB`, `MiB`, `GiB`).
fn parse_size(value: &str) -> Result<u64, String> {
    let rule = "expected a size of at least 1 byte, such as 1000000, 500KiB, 64MiB or 1GiB";
    let value = value.trim();
    let split = value
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(value.len());
    let (digits, unit) = value.split_at(split);
    let shift = match unit.trim() {
        "" | "B" => 0,
        "KiB" => 10,
        "MiB" => 20,
        "GiB" => 30,
        _ => return Err(rule.to_owned()),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .filter(|&n| n > 0)
        .ok_or_else(|| rule.to_owned())
}

pub(crate) fn parse_timeout(value: &str) -> Result<Duration, String> {
    duration_at_least(
        value,
        Duration::from_millis(100),
        "a timeout must be at least 100ms",
        "10s, 1500ms",
    )
}

fn parse_body_deadline(value: &str) -> Result<Duration, String> {
    duration_at_least(
        value,
        Duration::from_millis(100),
        "a body deadline must be at least 100ms",
        "60s, 1500ms",
    )
}

pub(crate) fn parse_cache_ttl(value: &str) -> Result<Duration, String> {
    let rule = "the replay cache's time to live must be between 1ms and 1h";
    // Any non-zero duration, as before.
    let ttl = duration_at_least(value, Duration::from_nanos(1), rule, "1s, 500ms")?;
    if ttl > Duration::from_secs(3600) {
        return Err(rule.to_owned());
    }
    Ok(ttl)
}

pub(crate) fn parse_retention(value: &str) -> Result<Duration, String> {
    duration_at_least(
        value,
        Duration::from_secs(1),
        "retention must be at least 1s",
        "24h, 90m, 3600s",
    )
}

pub(crate) fn parse_owner_grace(value: &str) -> Result<OwnerGrace, String> {
    if value == "off" {
        return Ok(OwnerGrace(None));
    }
    let grace = duration_at_least(
        value,
        Duration::from_millis(100),
        "the owner grace must be at least 100ms (or off)",
        "2s, 500ms, off",
    )?;
    Ok(OwnerGrace(Some(grace)))
}

pub(crate) fn parse_lease(value: &str) -> Result<Duration, String> {
    duration_at_least(
        value,
        Duration::from_millis(100),
        "lease must be at least 100ms",
        "30s, 1500ms",
    )
}

/// A human duration (`90m`, `1500ms`) of at least `min`; `rule` is the error below it, and
/// `examples` follow a parse error.
fn duration_at_least(
    value: &str,
    min: Duration,
    rule: &str,
    examples: &str,
) -> Result<Duration, String> {
    match humantime::parse_duration(value) {
        Ok(duration) if duration >= min => Ok(duration),
        Ok(_) => Err(rule.to_owned()),
        Err(error) => Err(format!("{error} (examples: {examples})")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_and_retention_parse() {
        assert_eq!(parse_token("a=s1").unwrap(), ("a".into(), "s1".into()));
        assert!(parse_token("a=").is_err() && parse_token("nosecret").is_err());
        assert_eq!(parse_retention("90m").unwrap(), Duration::from_secs(5400));
        assert!(parse_retention("0s").is_err() && parse_retention("soon").is_err());
        assert_eq!(parse_lease("1500ms").unwrap(), Duration::from_millis(1500));
        assert!(parse_lease("10ms").is_err() && parse_lease("soon").is_err());
        assert_eq!(
            parse_owner_grace("2s").unwrap().0,
            Some(Duration::from_secs(2))
        );
        assert_eq!(parse_owner_grace("off").unwrap().0, None);
        assert!(parse_owner_grace("50ms").is_err() && parse_owner_grace("no").is_err());
    }

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("1000000").unwrap(), 1_000_000);
        assert_eq!(parse_size("500KiB").unwrap(), 500 << 10);
        assert_eq!(parse_size("64 MiB").unwrap(), 64 << 20);
        assert_eq!(parse_size("1GiB").unwrap(), 1 << 30);
        for bad in [
            "0",
            "",
            "MiB",
            "10MB",
            "-5",
            "1.5MiB",
            "99999999999999999999GiB",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn cli_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
