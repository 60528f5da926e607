//! `idemkey serve`: the reference notes service.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use idemkey_notes::{NotesConfig, NotesDb, router, router_with_records};
use idemkey_sqlx::SqlxStore;
use idemkey_tower::Sweeper;
use metrics_exporter_prometheus::PrometheusBuilder;
use tokio::net::TcpListener;

use crate::cli::ServeArgs;
use idemkey_server::{
    Database, REPLAY_CACHE_BYTES, RedisRecords, RedisSetup, on_sql_backend, open_redis, redact,
};

/// Starts the service and runs it until SIGINT or SIGTERM.
pub(crate) async fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    idemkey_server::init_tracing();
    if let Some(base) = &args.problem_base {
        idemkey_core::problem::set_type_base(base.clone())
            .map_err(|set| anyhow::anyhow!("the problem type base is already {set}"))?;
    }
    let config = config(&args)?;
    let records = match &args.database.records_url {
        Some(url) => {
            let setup = RedisSetup {
                replicas: args.database.records_wait_replicas,
                fsync: args.database.records_wait_fsync,
                replay_cache: !args.no_replay_cache,
                tls_ca: args.database.records_tls_ca.clone(),
            };
            Some(open_redis(url, setup).await?)
        }
        None => None,
    };
    // The notes need a database: `open_sql` refuses Redis.
    let database = Database::open_sql(&args.database.database_url, true).await?;
    on_sql_backend!(
        database,
        store => serve(store, records, config, &args).await?,
        _ => anyhow::bail!("the notes need a database, not Redis records")
    );
    Ok(ExitCode::SUCCESS)
}

fn config(args: &ServeArgs) -> anyhow::Result<NotesConfig> {
    let handle = PrometheusBuilder::new()
        .install_recorder()
        .context("cannot install the metrics recorder")?;
    let upkeep = handle.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tick.tick().await;
            upkeep.run_upkeep();
        }
    });
    let mut tokens = args.tokens.clone();
    refuse_shared_secrets(&tokens)?;
    if tokens.is_empty() {
        tokens.push(("demo".to_owned(), uuid::Uuid::new_v4().simple().to_string()));
    }
    Ok(NotesConfig {
        tokens,
        mode: args.mode,
        retention: args.retention,
        lease: args.lease,
        owner_grace: args.owner_grace.0,
        optional_key: args.optional_key,
        secret: args.secret.as_deref().map(|s| Arc::from(s.as_bytes())),
        metrics: Some(Arc::new(move || handle.render())),
        strategy: args.strategy,
        lookup_first: lookup_first(args.lookup, args.no_lookup),
        separate_completion: args.separate_completion,
        ..NotesConfig::default()
    })
}

/// `--lookup` or `--no-lookup` (clap refuses both); neither: the database's default.
fn lookup_first(lookup: bool, no_lookup: bool) -> Option<bool> {
    match (lookup, no_lookup) {
        (true, _) => Some(true),
        (_, true) => Some(false),
        (false, false) => None,
    }
}

/// Refuses two actors with one token secret: the last would win, and one actor's clients
/// would act in the other's scope. The secret is not named in the error.
fn refuse_shared_secrets(tokens: &[(String, String)]) -> anyhow::Result<()> {
    let mut owners: std::collections::HashMap<&str, &str> = std::collections::HashMap::new();
    for (actor, secret) in tokens {
        match owners.insert(secret, actor) {
            Some(other) if other != actor => anyhow::bail!(
                "actors {other:?} and {actor:?} are given the same token secret: each actor needs its own"
            ),
            _ => {}
        }
    }
    Ok(())
}

async fn serve<DB: NotesDb>(
    store: SqlxStore<DB>,
    records: Option<RedisRecords>,
    config: NotesConfig,
    args: &ServeArgs,
) -> anyhow::Result<()> {
    let store = match args.replay_cache {
        Some(ttl) => store.with_replay_cache(ttl, REPLAY_CACHE_BYTES),
        None => store,
    }
    .with_actor_caps(args.actor_caps());
    DB::migrate_notes(store.pool())
        .await
        .context("cannot create the notes table")?;
    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener.local_addr()?;
    announce(&config, args, addr);
    let every = (args.retention / 10).clamp(Duration::from_secs(1), Duration::from_secs(60));
    let executions = config.executions.clone();
    // Redis expires its records by itself: a sweeper is for records in the database.
    let (app, sweeper) = match records {
        Some(records) => (router_with_records(store.clone(), records, config), None),
        None => (
            router(store.clone(), config),
            Some(Sweeper::spawn(store.clone(), every)),
        ),
    };
    idemkey_server::serve(
        listener,
        app,
        args.connections.limits(),
        idemkey_server::shutdown(),
    )
    .await;
    // Handlers whose clients left still run in their own tasks: let them store or commit.
    executions.wait().await;
    if let Some(sweeper) = sweeper {
        sweeper.stop().await;
    }
    store.close().await;
    tracing::info!("stopped");
    Ok(())
}

fn announce(config: &NotesConfig, args: &ServeArgs, addr: std::net::SocketAddr) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "idemkey serve: listening on http://{addr} ({} mode, {}{})",
        config.mode,
        redact(&args.database.database_url),
        args.database
            .records_url
            .as_deref()
            .map(|url| format!(", records in {}", redact(url)))
            .unwrap_or_default()
    );
    if args.tokens.is_empty() {
        let token = &config.tokens[0].1;
        let _ = writeln!(
            out,
            "no --token given: made up a token for actor \"demo\": {token}\ntry:\n  curl -i http://{addr}/v1/notes -H 'Authorization: Bearer {token}' -H 'Idempotency-Key: my-first-note' -H 'Content-Type: application/json' -d '{{\"title\": \"hello\"}}'"
        );
    }
    let _ = out.flush();
}
