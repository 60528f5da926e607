//! The arguments and parsers several commands share: where the records are, the bounds on
//! clients' connections, durations, secrets.

use std::time::Duration;

use clap::Args;

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

/// The `--owner-grace` of `serve` and `proxy`: a grace, or `off`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OwnerGrace(pub(crate) Option<Duration>);

pub(crate) fn parse_secret(value: &str) -> Result<String, String> {
    if value.is_empty() {
        return Err("the secret must not be empty".into());
    }
    Ok(value.to_owned())
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
    fn durations_parse() {
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
}
