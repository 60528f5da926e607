//! The flags of `idemkey proxy` (behaviour [§14](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#14-the-proxy)).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use idemkey_proxy::CapValue;

use crate::args::{
    ConnectionArgs, OwnerGrace, parse_cache_ttl, parse_lease, parse_owner_grace, parse_retention,
    parse_secret,
};

/// `idemkey proxy --upstream URL ...`.
#[derive(Debug, Args)]
pub(crate) struct ProxyArgs {
    /// The API to put idempotency keys in front of: `http://HOST:PORT[/BASE]`.
    #[arg(long, env = "IDEMKEY_UPSTREAM")]
    pub(crate) upstream: String,
    /// The address clients connect to (port 0 picks a free one; the address is printed).
    #[arg(long, env = "IDEMKEY_LISTEN", default_value = "127.0.0.1:8080")]
    pub(crate) listen: SocketAddr,
    /// The address of `/healthz` and `/metrics`, apart from the upstream's paths.
    #[arg(long, env = "IDEMKEY_ADMIN_LISTEN", default_value = "127.0.0.1:9090")]
    pub(crate) admin_listen: SocketAddr,
    /// Where the records are: `sqlite://FILE`, or for several proxies `postgres://...` or
    /// `redis://HOST:PORT` (`redis+cluster://H1:P1,H2:P2`).
    #[arg(
        long,
        env = "IDEMKEY_DATABASE_URL",
        hide_env_values = true,
        default_value = "sqlite://idemkey-proxy.db"
    )]
    pub(crate) database_url: String,
    /// With a `redis://` database: each stored answer waits until this many Redis replicas
    /// have it (`WAIT`, at most 1 s), so a failover keeps it. Standalone servers only.
    #[arg(long, env = "IDEMKEY_RECORDS_WAIT_REPLICAS", value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) records_wait_replicas: Option<u32>,
    /// With a `redis://` database: each stored answer waits until Redis has fsynced it to its
    /// append-only file (`WAITAOF`, Redis 7.2+ or Valkey, `appendonly yes`; at most 1 s).
    #[arg(long, env = "IDEMKEY_RECORDS_WAIT_FSYNC")]
    pub(crate) records_wait_fsync: bool,
    /// With a SQL database: keep completed records in memory for this long (e.g. `1s`), so
    /// replays of a hot key skip the database (at most 64 MiB). Off by default: a `forget`
    /// by another process, and a record's expiry, reach this proxy only after this long.
    #[arg(long, env = "IDEMKEY_REPLAY_CACHE", value_name = "TTL", value_parser = parse_cache_ttl)]
    pub(crate) replay_cache: Option<Duration>,
    /// With a `redis://` database: do not keep completed records in memory. On by default
    /// there (standalone servers): Redis tells this process at once when a record it holds
    /// changes (`CLIENT TRACKING`), so no copy outlives its record.
    #[arg(long, env = "IDEMKEY_NO_REPLAY_CACHE")]
    pub(crate) no_replay_cache: bool,
    /// With a `rediss://` database: trust only this CA certificate (a PEM file) for the
    /// server's certificate, instead of the system's roots.
    #[arg(long, env = "IDEMKEY_RECORDS_TLS_CA", value_name = "FILE")]
    pub(crate) records_tls_ca: Option<PathBuf>,
    /// A TOML file: covered routes, keys required per route, mismatch status, waits,
    /// fingerprint headers, the actor's source, the upstream's timeout (docs/proxy.md).
    #[arg(long, env = "IDEMKEY_PROXY_CONFIG", value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// How long completed records are kept, e.g. `24h`, `90m`.
    #[arg(long, env = "IDEMKEY_RETENTION", default_value = "24h", value_parser = parse_retention)]
    pub(crate) retention: Duration,
    /// How long a claim holds its key, renewed while the upstream works; a crashed proxy's
    /// claims block retries (409) this long, e.g. `30s`.
    #[arg(long, env = "IDEMKEY_LEASE", default_value = "30s", value_parser = parse_lease)]
    pub(crate) lease: Duration,
    /// The proxy writes a heartbeat every quarter of this; once it is this old, its claims
    /// may be taken over, so a retry of a request whose proxy died is forwarded again after
    /// about this long, not after the lease. A live proxy stalled longer loses its claims.
    /// `off`: the lease alone. E.g. `2s`, `500ms`.
    #[arg(long, env = "IDEMKEY_OWNER_GRACE", default_value = "1s", value_parser = parse_owner_grace)]
    pub(crate) owner_grace: OwnerGrace,
    /// The upstream honours the derived key (a request it receives again under the same
    /// `Idempotency-Derived-Key` is not executed again): a retry of a request whose proxy
    /// stopped mid-forward is then forwarded again. Without it such a retry is answered and
    /// stored 500 `previous-attempt-unknown`, never forwarded twice. Sets the file's
    /// `[upstream] deduplicates`; a route's `upstream_deduplicates` still overrides it.
    #[arg(long, env = "IDEMKEY_UPSTREAM_DEDUPLICATES")]
    pub(crate) upstream_deduplicates: bool,
    /// The secret behind derived keys and actor digests. Unset, the store's own is used: made
    /// once and kept in the database, so the same for every proxy and restart. Changing it
    /// changes every actor: earlier records no longer match.
    #[arg(long, env = "IDEMKEY_SECRET", hide_env_values = true, value_parser = parse_secret)]
    pub(crate) secret: Option<String>,
    /// Where your API documents problem types: each `type` is this URL followed by the slug.
    /// Unset, it is idemkey's own page, a section per slug:
    /// https://docs.rs/idemkey/latest/idemkey/problems/index.html#
    #[arg(long, env = "IDEMKEY_PROBLEM_BASE", value_name = "URL")]
    pub(crate) problem_base: Option<String>,
    /// Most live idempotency records one actor (each credential, and the shared anonymous
    /// actor) may hold, or `unlimited`; a request that would create one more is answered 429
    /// `actor-cap-reached` and not forwarded. Over the file's `max_records_per_actor`;
    /// default 100000.
    #[arg(long, env = "IDEMKEY_MAX_RECORDS_PER_ACTOR", value_name = "N",
        value_parser = parse_records, hide_short_help = true)]
    pub(crate) max_records_per_actor: Option<CapValue>,
    /// Most bytes of stored answers one actor may hold (`256MiB`, `500KiB`, `1000000`), or
    /// `unlimited`; past it, new keys are answered 429 `actor-cap-reached`. Over the file's
    /// `max_bytes_per_actor`; default 256MiB.
    #[arg(long, env = "IDEMKEY_MAX_BYTES_PER_ACTOR", value_name = "SIZE",
        value_parser = parse_bytes, hide_short_help = true)]
    pub(crate) max_bytes_per_actor: Option<CapValue>,
    #[command(flatten)]
    pub(crate) connections: ConnectionArgs,
}

/// The live records one actor may hold unless told otherwise: at the default 24 h retention,
/// about 70 new keys a minute per credential, all day.
pub(crate) const DEFAULT_MAX_RECORDS_PER_ACTOR: u64 = 100_000;

/// The bytes of stored answers one actor may hold unless told otherwise: 256 answers of the
/// largest size the proxy stores (1 MiB).
pub(crate) const DEFAULT_MAX_BYTES_PER_ACTOR: u64 = 256 << 20;

impl ProxyArgs {
    /// Sets in `config` what the flags say over the file: the caps, and whether the upstream
    /// deduplicates.
    pub(crate) fn flags_into(&self, config: &mut idemkey_proxy::ProxyConfig) {
        self.caps_into(config);
        if self.upstream_deduplicates {
            config.upstream.deduplicates = true;
        }
    }

    /// Sets the per-actor caps in `config`: the flags over the file, the defaults where
    /// neither says.
    pub(crate) fn caps_into(&self, config: &mut idemkey_proxy::ProxyConfig) {
        let chosen = |flag: &Option<CapValue>, file: &mut Option<CapValue>, default| {
            *file = flag
                .clone()
                .or_else(|| file.take())
                .or(Some(CapValue::Number(default)));
        };
        chosen(
            &self.max_records_per_actor,
            &mut config.max_records_per_actor,
            DEFAULT_MAX_RECORDS_PER_ACTOR,
        );
        chosen(
            &self.max_bytes_per_actor,
            &mut config.max_bytes_per_actor,
            DEFAULT_MAX_BYTES_PER_ACTOR,
        );
    }
}

fn parse_records(value: &str) -> Result<CapValue, String> {
    let cap = CapValue::Text(value.to_owned());
    cap.records("--max-records-per-actor")
        .map_err(|_| "expected a whole number of at least 1, or unlimited".to_owned())?;
    Ok(cap)
}

fn parse_bytes(value: &str) -> Result<CapValue, String> {
    let cap = CapValue::Text(value.to_owned());
    cap.bytes("--max-bytes-per-actor").map_err(|_| {
        "expected a size of at least 1 byte, such as 1000000, 500KiB, 256MiB or 1GiB, or unlimited"
            .to_owned()
    })?;
    Ok(cap)
}
