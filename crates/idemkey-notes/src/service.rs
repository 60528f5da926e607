//! The notes service as a process runs it: the store its URLs name, a Prometheus recorder for
//! `/metrics`, bearer tokens (one made up when none is given), a sweeper for records kept in
//! the database, and the listener, served until shutdown with every running handler let
//! finish. `idemkey serve` is this with a command line around it.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use idemkey_core::ActorCaps;
use idemkey_server::{
    Database, Limits, REPLAY_CACHE_BYTES, RedisRecords, RedisSetup, on_sql_backend, open_redis,
    redact,
};
use idemkey_sqlx::SqlxStore;
use idemkey_tower::Sweeper;
use metrics_exporter_prometheus::PrometheusBuilder;
use tokio::net::TcpListener;

use crate::{Mode, NotesConfig, NotesDb, router, router_with_records};

/// Everything the service needs besides the notes' own settings. `Debug` shows the URLs
/// redacted.
#[derive(Clone)]
pub struct ServiceOptions {
    /// The address to listen on (port 0 picks a free one; [`Ready::addr`] says which).
    pub listen: SocketAddr,
    /// The notes' database (`sqlite://`, `postgres://`, `mysql://`); idemkey's records too,
    /// unless [`records`](Self::records) names Redis.
    pub database_url: String,
    /// Lease mode's records in Redis instead: the URL and how to open it.
    pub records: Option<(String, RedisSetup)>,
    /// Keep completed records of the database in memory for this long.
    pub replay_cache: Option<Duration>,
    /// Per-actor caps on the records in the database.
    pub actor_caps: ActorCaps,
    /// The bounds on the connections and their requests.
    pub limits: Limits,
    /// The problem types' base URL, set once for the process
    /// ([`set_type_base`](idemkey_core::problem::set_type_base)).
    pub problem_base: Option<String>,
}

impl std::fmt::Debug for ServiceOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let records = self
            .records
            .as_ref()
            .map(|(url, setup)| (redact(url), setup));
        f.debug_struct("ServiceOptions")
            .field("listen", &self.listen)
            .field("database_url", &redact(&self.database_url))
            .field("records", &records)
            .field("replay_cache", &self.replay_cache)
            .field("actor_caps", &self.actor_caps)
            .field("limits", &self.limits)
            .field("problem_base", &self.problem_base)
            .finish()
    }
}

/// What the service tells its caller once it listens.
#[derive(Debug)]
pub struct Ready<'a> {
    /// Where it listens.
    pub addr: SocketAddr,
    /// The mode it runs in: records given in Redis make it lease mode.
    pub mode: Mode,
    /// The token made up for actor `demo` when the configuration named none.
    pub made_up_token: Option<&'a str>,
}

/// Why the service could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServiceError {
    /// The process already has a problem type base, another than the one given.
    #[error("the problem type base is already {0}")]
    ProblemBase(String),
    /// Another metrics recorder is installed.
    #[error("cannot install the metrics recorder")]
    Metrics(#[source] metrics_exporter_prometheus::BuildError),
    /// Two actors were given one token secret: one actor's clients would act in the other's
    /// scope. The secret is not part of the message.
    #[error("actors {0:?} and {1:?} are given the same token secret: each actor needs its own")]
    SharedSecret(String, String),
    /// The database or the Redis records could not be opened.
    #[error(transparent)]
    Open(#[from] idemkey_server::Error),
    /// The database URL names Redis: the notes need a database.
    #[error("the notes need a database, not Redis records")]
    NotADatabase,
    /// The `notes` table could not be created.
    #[error("cannot create the notes table")]
    Migrate(#[source] sqlx::Error),
    /// The address could not be bound.
    #[error("cannot listen on {addr}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Runs the notes service until `shutdown` completes, calling `ready` once it listens; then
/// lets the handlers still running (their clients may have left) store or commit, stops the
/// sweeper and closes the store.
pub async fn serve(
    options: ServiceOptions,
    mut config: NotesConfig,
    ready: impl FnOnce(Ready<'_>),
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServiceError> {
    if let Some(base) = &options.problem_base {
        idemkey_core::problem::set_type_base(base.clone()).map_err(ServiceError::ProblemBase)?;
    }
    config.metrics = Some(install_metrics()?);
    let made_up = tokens(&mut config)?;
    let records = match &options.records {
        Some((url, setup)) => Some(open_redis(url, setup.clone()).await?),
        None => None,
    };
    let database = Database::open_sql(&options.database_url, true).await?;
    let start = Start {
        options,
        config,
        records,
        made_up,
    };
    on_sql_backend!(
        database,
        store => start.run(store, ready, shutdown).await,
        _ => Err(ServiceError::NotADatabase)
    )
}

/// A Prometheus recorder for the process, rendered by `/metrics`, with its upkeep running.
fn install_metrics() -> Result<crate::RenderMetrics, ServiceError> {
    let handle = PrometheusBuilder::new()
        .install_recorder()
        .map_err(ServiceError::Metrics)?;
    let upkeep = handle.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tick.tick().await;
            upkeep.run_upkeep();
        }
    });
    Ok(Arc::new(move || handle.render()))
}

/// Refuses two actors with one secret; with no token at all, makes one up for actor `demo`
/// and returns it.
fn tokens(config: &mut NotesConfig) -> Result<Option<String>, ServiceError> {
    let mut owners = std::collections::HashMap::new();
    for (actor, secret) in &config.tokens {
        match owners.insert(secret, actor) {
            Some(other) if other != actor => {
                return Err(ServiceError::SharedSecret(other.clone(), actor.clone()));
            }
            _ => {}
        }
    }
    if !config.tokens.is_empty() {
        return Ok(None);
    }
    let token = uuid::Uuid::new_v4().simple().to_string();
    config.tokens.push(("demo".to_owned(), token.clone()));
    Ok(Some(token))
}

/// The service between opening its stores and serving.
struct Start {
    options: ServiceOptions,
    config: NotesConfig,
    records: Option<RedisRecords>,
    made_up: Option<String>,
}

impl Start {
    async fn run<DB: NotesDb>(
        self,
        store: SqlxStore<DB>,
        ready: impl FnOnce(Ready<'_>),
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServiceError> {
        let options = &self.options;
        let store = match options.replay_cache {
            Some(ttl) => store.with_replay_cache(ttl, REPLAY_CACHE_BYTES),
            None => store,
        }
        .with_actor_caps(options.actor_caps);
        DB::migrate_notes(store.pool())
            .await
            .map_err(ServiceError::Migrate)?;
        let listener =
            TcpListener::bind(options.listen)
                .await
                .map_err(|source| ServiceError::Listen {
                    addr: options.listen,
                    source,
                })?;
        let addr = listener
            .local_addr()
            .map_err(|source| ServiceError::Listen {
                addr: options.listen,
                source,
            })?;
        ready(Ready {
            addr,
            mode: if self.records.is_some() {
                Mode::Lease
            } else {
                self.config.mode
            },
            made_up_token: self.made_up.as_deref(),
        });
        let every =
            (self.config.retention / 10).clamp(Duration::from_secs(1), Duration::from_secs(60));
        let executions = self.config.executions.clone();
        // Redis expires its records by itself: a sweeper is for records in the database.
        let (app, sweeper) = match self.records {
            Some(records) => (
                router_with_records(store.clone(), records, self.config),
                None,
            ),
            None => (
                router(store.clone(), self.config),
                Some(Sweeper::spawn(store.clone(), every)),
            ),
        };
        idemkey_server::serve(listener, app, options.limits, shutdown).await;
        // Handlers whose clients left still run in their own tasks: let them store or commit.
        executions.wait().await;
        if let Some(sweeper) = sweeper {
            sweeper.stop().await;
        }
        store.close().await;
        tracing::info!("stopped");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_options_debug_form_hides_passwords() {
        let options = ServiceOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            database_url: "postgres://u:hunter2@db/notes".to_owned(),
            records: Some(("redis://:hunter3@r:6379".to_owned(), RedisSetup::default())),
            replay_cache: None,
            actor_caps: ActorCaps::new(),
            limits: Limits::default(),
            problem_base: None,
        };
        let shown = format!("{options:?}");
        assert!(
            !shown.contains("hunter2") && !shown.contains("hunter3"),
            "{shown}"
        );
        assert!(shown.contains("db/notes"), "{shown}");
    }
}
