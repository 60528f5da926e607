//! Connecting by URL: a standalone server or a cluster, with bounded waits.

use std::time::Duration;

use idemkey_core::{Error, Result};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::{AsyncConnectionConfig, IntoConnectionInfo};

use crate::cache::TrackedCache;
use crate::durable::{Durable, Wait};
use crate::error::{Sent, store_error};
use crate::{DEFAULT_PREFIX, RedisConnection, RedisStore};

/// How [`RedisStore::connect_with`] connects, and the store it makes.
///
/// Every wait is bounded, so that a request made while Redis is down fails with
/// [`Error::Unavailable`] instead of hanging; the standalone manager reconnects by itself
/// once the server is back.
#[derive(Clone, Debug)]
pub struct RedisOptions {
    prefix: String,
    connection_timeout: Duration,
    response_timeout: Duration,
    operation_timeout: Duration,
    wait: Wait,
    /// The replay cache's memory bound and staleness bound, if asked for.
    replay_cache: Option<(u64, Duration)>,
    /// The only CA trusted for `rediss://` servers (PEM), instead of the system's.
    tls_ca: Option<Vec<u8>>,
}

impl Default for RedisOptions {
    fn default() -> Self {
        Self {
            prefix: DEFAULT_PREFIX.to_owned(),
            connection_timeout: Duration::from_secs(1),
            response_timeout: Duration::from_secs(2),
            operation_timeout: Duration::from_secs(5),
            wait: Wait::default(),
            replay_cache: None,
            tls_ca: None,
        }
    }
}

impl RedisOptions {
    /// The defaults: prefix `idemkey`, 1 s to connect, 2 s for a reply, 5 s per operation.
    pub fn new() -> Self {
        Self::default()
    }

    /// The prefix of every key the store writes (no braces). Stores that share a prefix share
    /// their records and their secret.
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// How long one connection attempt may take.
    #[must_use]
    pub fn connection_timeout(mut self, timeout: Duration) -> Self {
        self.connection_timeout = timeout;
        self
    }

    /// How long a sent command may wait for its reply.
    #[must_use]
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// Each completion returns only once `replicas` replicas have acknowledged it (Redis's
    /// `WAIT`), or after `timeout` with a warning (the completion stands: it is on the master).
    /// A response is then answered only once it would survive the loss of the master, so a
    /// failover cannot make its retry execute again.
    ///
    /// With [`Self::wait_fsync`], the replicas must also have written it to their append-only
    /// files (`WAITAOF 1 <replicas>`). Costs a replication round trip per completion, on a
    /// connection of its own so that other requests do not wait behind it. Standalone servers
    /// only: a cluster would route the wait to every master rather than to the record's.
    #[must_use]
    pub fn wait_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.wait.replicas = replicas;
        self.wait.timeout = timeout;
        self
    }

    /// Each completion returns only once the server has fsynced it to its append-only file
    /// (Redis 7.2+ and Valkey's `WAITAOF`), or after `timeout` with a warning. With
    /// `appendfsync everysec` a server crash loses up to a second of acknowledged writes; with
    /// this wait, no acknowledged response is among them, whatever the fsync policy. The
    /// server must run with `appendonly yes`: [`RedisStore::connect_with`] refuses one that
    /// does not, or that does not know `WAITAOF`. Standalone servers only.
    #[must_use]
    pub fn wait_fsync(mut self, timeout: Duration) -> Self {
        self.wait.fsync = true;
        self.wait.timeout = timeout;
        self
    }

    /// Keeps completed records in the process, up to `max_bytes`, so that replays of a hot key
    /// are answered without a round trip. Exact: a copy is filled over a connection of its own
    /// on which the server tracks the keys it read (`CLIENT TRACKING`, RESP3), and dropped as
    /// soon as the server says the key changed, whoever changed it (a `forget` elsewhere,
    /// expiry, a restart). A copy also goes at its record's expiry by this process's clock,
    /// and none is served while the tracking connection is lost or has not answered a
    /// heartbeat for a second. Claims, takeovers and executions are still decided by the
    /// server. Standalone servers only.
    #[must_use]
    pub fn replay_cache(mut self, max_bytes: u64) -> Self {
        self.replay_cache = Some((max_bytes, crate::cache::DEFAULT_STALENESS));
        self
    }

    /// With `rediss://` (TLS): trust only the CA certificate `pem` (PEM), not the system's
    /// roots. Without it, a TLS server's certificate is checked against the system's roots
    /// (and a file named by `SSL_CERT_FILE`).
    #[must_use]
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_ca = Some(pem.into());
        self
    }

    /// A client for the server `info` names, trusting [`Self::tls_root_certificate`] if set.
    pub(crate) fn client(&self, info: redis::ConnectionInfo) -> Result<redis::Client> {
        install_crypto_provider();
        match &self.tls_ca {
            Some(ca) => redis::Client::build_with_tls(info, certificates(ca)),
            None => redis::Client::open(info),
        }
        .map_err(invalid)
    }

    /// How long one store operation may take in all (reconnecting, redirections, retries).
    #[must_use]
    pub fn operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = timeout;
        self
    }
}

impl RedisStore<RedisConnection> {
    /// Connects with [`RedisOptions::default`]; see [`Self::connect_with`].
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, &RedisOptions::default()).await
    }

    /// Connects to the server or cluster that `url` names:
    ///
    /// - `redis://[USER:PASSWORD@]HOST[:PORT][/DB]`: a standalone server; `redis+unix:///PATH` over a Unix socket;
    /// - `redis+cluster://[USER:PASSWORD@]HOST:PORT[,HOST:PORT…]`: a cluster, found from any of
    ///   the listed nodes.
    ///
    /// The first connection is made here: [`Error::Unavailable`] when nothing answers,
    /// [`Error::Backend`] for a malformed URL or a refused login.
    pub async fn connect_with(url: &str, options: &RedisOptions) -> Result<Self> {
        let connection = match cluster_nodes(url)? {
            Some(_) if options.wait.is_set() => {
                return Err(Error::Backend(
                    "waiting for replicas or fsync is supported on a standalone server only".into(),
                ));
            }
            Some(_) if options.replay_cache.is_some() => {
                return Err(Error::Backend(
                    "the replay cache is supported on a standalone server only".into(),
                ));
            }
            Some(nodes) => RedisConnection::Cluster(cluster(nodes, options).await?),
            None => RedisConnection::Standalone(standalone(url, options).await?),
        };
        let standalone = matches!(connection, RedisConnection::Standalone(_));
        let mut store = Self::new(connection)
            .with_prefix(&options.prefix)?
            .with_timeout(options.operation_timeout);
        if standalone {
            store = store.with_owner_heartbeats().on_one_server();
        }
        if let Some((max_bytes, staleness)) = options.replay_cache {
            let config = AsyncConnectionConfig::new()
                .set_connection_timeout(Some(options.connection_timeout))
                .set_response_timeout(Some(options.response_timeout));
            let client = TrackedCache::resp3(url, options)?;
            store =
                store.with_cache(TrackedCache::start(client, max_bytes, staleness, config).await?);
        }
        if !options.wait.is_set() {
            return Ok(store);
        }
        let client = options.client(url.into_connection_info().map_err(invalid)?)?;
        let durable = Durable::new(
            options.wait,
            client,
            options.connection_timeout,
            options.response_timeout,
        )
        .await?;
        Ok(store.with_durable(durable))
    }
}

async fn standalone(url: &str, options: &RedisOptions) -> Result<ConnectionManager> {
    let client = options.client(url.into_connection_info().map_err(invalid)?)?;
    // One quick retry: a request waits for the reconnection, so few and short attempts keep
    // it bounded; the next request starts a new one.
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(options.connection_timeout))
        .set_response_timeout(Some(options.response_timeout))
        .set_number_of_retries(1)
        .set_min_delay(Duration::from_millis(50))
        .set_max_delay(Duration::from_millis(200));
    ConnectionManager::new_with_config(client, config)
        .await
        .map_err(|e| store_error(e, Sent::Harmless))
}

async fn cluster(
    nodes: Vec<String>,
    options: &RedisOptions,
) -> Result<redis::cluster_async::ClusterConnection> {
    install_crypto_provider();
    let mut builder = ClusterClient::builder(nodes);
    if let Some(ca) = &options.tls_ca {
        builder = builder.certs(certificates(ca));
    }
    let client = builder
        .connection_timeout(options.connection_timeout)
        .response_timeout(options.response_timeout)
        .overall_response_timeout(Some(options.operation_timeout))
        .retries(3)
        .build()
        .map_err(invalid)?;
    client
        .get_async_connection()
        .await
        .map_err(|e| store_error(e, Sent::Harmless))
}

/// The CA of [`RedisOptions::tls_root_certificate`] as the only root; no client certificate.
fn certificates(ca: &[u8]) -> redis::TlsCertificates {
    redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(ca.to_vec()),
    }
}

/// Makes ring the process's TLS crypto provider unless one is installed already: redis-rs's
/// TLS asks rustls for the default provider, and there is none until someone installs it.
fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Another thread may have installed one meanwhile: theirs stands, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

pub(crate) fn invalid(error: redis::RedisError) -> Error {
    Error::Backend(Box::new(error))
}

/// The node URLs of a `redis+cluster://` or `rediss+cluster://` URL, `None` for any other
/// scheme. Credentials and query parameters apply to every node.
fn cluster_nodes(url: &str) -> Result<Option<Vec<String>>> {
    let (scheme, rest) = if let Some(rest) = url.strip_prefix("redis+cluster://") {
        ("redis", rest)
    } else if let Some(rest) = url.strip_prefix("rediss+cluster://") {
        ("rediss", rest)
    } else {
        return Ok(None);
    };
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (login, hosts) = match rest.rsplit_once('@') {
        Some((login, hosts)) => (format!("{login}@"), hosts),
        None => (String::new(), rest),
    };
    let hosts = hosts.strip_suffix('/').unwrap_or(hosts);
    let query = if query.is_empty() {
        String::new()
    } else {
        format!("?{query}")
    };
    let nodes: Vec<String> = hosts
        .split(',')
        .filter(|host| !host.is_empty())
        .map(|host| format!("{scheme}://{login}{host}{query}"))
        .collect();
    if nodes.is_empty() || hosts.contains('/') {
        return Err(Error::Backend(
            "a cluster URL is redis+cluster://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]".into(),
        ));
    }
    Ok(Some(nodes))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn cluster_urls_list_their_nodes() {
        assert_eq!(cluster_nodes("redis://h:1").unwrap(), None);
        assert_eq!(
            cluster_nodes("redis+cluster://a:1,b:2").unwrap().unwrap(),
            ["redis://a:1", "redis://b:2"]
        );
        assert_eq!(
            cluster_nodes("rediss+cluster://u:p@a:1,b:2/?protocol=resp3")
                .unwrap()
                .unwrap(),
            [
                "rediss://u:p@a:1?protocol=resp3",
                "rediss://u:p@b:2?protocol=resp3"
            ]
        );
        assert!(cluster_nodes("redis+cluster://").is_err());
        assert!(cluster_nodes("redis+cluster://a:1/3").is_err());
    }
}
