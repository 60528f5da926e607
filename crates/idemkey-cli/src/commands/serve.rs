//! `idemkey serve`: the reference notes service.

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use idemkey_notes::{Mode, NotesConfig, Ready, ServiceOptions};
use idemkey_server::{RedisSetup, redact};
use idemkey_sqlx::Strategy;

use crate::args::{
    ConnectionArgs, DatabaseArgs, OwnerGrace, parse_cache_ttl, parse_lease, parse_owner_grace,
    parse_retention, parse_secret,
};

/// `idemkey serve`'s arguments.
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

impl ServeArgs {
    /// What clap cannot check, as the error's message: atomic mode's records must commit with
    /// the notes, so they cannot live in Redis (behaviour [§13](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#13-the-reference-notes-service)), and the replay cache's
    /// time to live and the caps are for records in the database.
    pub(crate) fn conflict(&self) -> Option<&'static str> {
        self.database.records_url.as_ref()?;
        if self.mode == Mode::Atomic {
            Some(
                "--records-url needs --mode lease: atomic mode commits its records with the notes, in --database-url",
            )
        } else if self.replay_cache.is_some() {
            Some(
                "--replay-cache is for records in --database-url: with --records-url redis://, replays are cached by default, kept exact by Redis (--no-replay-cache turns that off)",
            )
        } else if !self.actor_caps().is_unlimited() {
            Some("per-actor caps are not supported with --records-url yet")
        } else {
            None
        }
    }

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

/// Starts the service and runs it until SIGINT or SIGTERM.
pub(crate) async fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    idemkey_server::init_tracing();
    let options = ServiceOptions {
        listen: args.listen,
        database_url: args.database.database_url.clone(),
        records: args.database.records_url.clone().map(|url| {
            let setup = RedisSetup {
                replicas: args.database.records_wait_replicas,
                fsync: args.database.records_wait_fsync,
                replay_cache: !args.no_replay_cache,
                tls_ca: args.database.records_tls_ca.clone(),
            };
            (url, setup)
        }),
        replay_cache: args.replay_cache,
        actor_caps: args.actor_caps(),
        limits: args.connections.limits(),
        problem_base: args.problem_base.clone(),
    };
    let announce = |ready: Ready<'_>| announce(&ready, &args);
    idemkey_notes::serve(options, config(&args), announce, idemkey_server::shutdown()).await?;
    Ok(ExitCode::SUCCESS)
}

/// The notes' settings; the service adds the metrics and, without any token, one for `demo`.
fn config(args: &ServeArgs) -> NotesConfig {
    NotesConfig {
        tokens: args.tokens.clone(),
        mode: args.mode,
        retention: args.retention,
        lease: args.lease,
        owner_grace: args.owner_grace.0,
        optional_key: args.optional_key,
        secret: args.secret.as_deref().map(|s| Arc::from(s.as_bytes())),
        strategy: args.strategy,
        lookup_first: lookup_first(args.lookup, args.no_lookup),
        separate_completion: args.separate_completion,
        ..NotesConfig::default()
    }
}

/// `--lookup` or `--no-lookup` (clap refuses both); neither: the database's default.
fn lookup_first(lookup: bool, no_lookup: bool) -> Option<bool> {
    match (lookup, no_lookup) {
        (true, _) => Some(true),
        (_, true) => Some(false),
        (false, false) => None,
    }
}

/// The line scripts wait for, `idemkey serve: listening on ...`, and with a made-up token
/// how to use it.
fn announce(ready: &Ready<'_>, args: &ServeArgs) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "idemkey serve: listening on http://{} ({} mode, {}{})",
        ready.addr,
        ready.mode,
        redact(&args.database.database_url),
        args.database
            .records_url
            .as_deref()
            .map(|url| format!(", records in {}", redact(url)))
            .unwrap_or_default()
    );
    if let Some(token) = ready.made_up_token {
        let addr = ready.addr;
        let _ = writeln!(
            out,
            "no --token given: made up a token for actor \"demo\": {token}\ntry:\n  curl -i http://{addr}/v1/notes -H 'Authorization: Bearer {token}' -H 'Idempotency-Key: my-first-note' -H 'Content-Type: application/json' -d '{{\"title\": \"hello\"}}'"
        );
    }
    let _ = out.flush();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_parse() {
        assert_eq!(parse_token("a=s1").unwrap(), ("a".into(), "s1".into()));
        assert!(parse_token("a=").is_err() && parse_token("nosecret").is_err());
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
}
