//! `idemkey-actix-notes serve`: idemkey's notes service on actix-web, through the
//! idemkey-actix middleware. The same HTTP API as `idemkey serve` (`POST /v1/notes`,
//! `GET /v1/notes/{id}`, `GET /v1/notes`, `/healthz`, `/metrics`, `/openapi.json`), the same
//! answers, and the same command line for what it shares with it, so that one black-box
//! suite runs against either.

mod app;
mod auth;

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use idemkey_notes::{Mode, NotesConfig, NotesDb};
use idemkey_server::{Database, on_sql_backend, redact};
use idemkey_sqlx::{SqlxStore, Strategy};

/// idemkey's notes service on actix-web.
#[derive(Debug, Parser)]
#[command(version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serves the notes API until SIGTERM or Ctrl-C.
    Serve(ServeArgs),
}

/// `serve`'s arguments: `idemkey serve`'s, those an actix application has.
#[derive(Debug, clap::Args)]
struct ServeArgs {
    /// The address to listen on (port 0 picks a free one; the address is printed).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// `sqlite://FILE`, `postgres://...` or `mysql://...`: the notes and their records.
    #[arg(long, default_value = "sqlite://idemkey.db")]
    database_url: String,
    /// A bearer token, as ACTOR=SECRET; repeatable. Without any, a token for actor `demo`
    /// is made up and printed.
    #[arg(long = "token", value_delimiter = ',', value_parser = parse_token)]
    tokens: Vec<(String, String)>,
    /// `atomic` (the record commits with the note) or `lease`.
    #[arg(long, default_value = "atomic")]
    mode: Mode,
    /// Requests without a key run, unrecorded.
    #[arg(long)]
    optional_key: bool,
    /// How long completed records are kept, e.g. `24h`, `90m`.
    #[arg(long, default_value = "24h", value_parser = parse_duration)]
    retention: Duration,
    /// Atomic mode: `commit-time` or `claim-first`.
    #[arg(long, default_value = "commit-time")]
    strategy: Strategy,
    /// Lease mode: how long a claim of a live process holds its key.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    lease: Duration,
    /// Lease mode: a claim whose process's heartbeat is this old is taken over; `off`: the
    /// lease alone.
    #[arg(long, default_value = "1s")]
    owner_grace: String,
    /// Worker threads (actix's workers); by default one a core.
    #[arg(long, env = "IDEMKEY_ACTIX_WORKERS")]
    workers: Option<usize>,
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

fn parse_duration(value: &str) -> Result<Duration, String> {
    humantime::parse_duration(value).map_err(|error| format!("{error} (for example 30s, 1500ms)"))
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let Command::Serve(args) = Cli::parse().command;
    match actix_web::rt::System::new().block_on(serve(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("idemkey-actix-notes: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let config = config(&args)?;
    let database = Database::open_sql(&args.database_url, true).await?;
    on_sql_backend!(
        database,
        store => run(store, config, &args).await,
        _ => anyhow::bail!("the notes need a database, not Redis records")
    )
}

/// The notes' settings from the command line, with a made-up token when none is given.
fn config(args: &ServeArgs) -> anyhow::Result<NotesConfig> {
    let owner_grace = match args.owner_grace.as_str() {
        "off" => None,
        grace => Some(parse_duration(grace).map_err(anyhow::Error::msg)?),
    };
    let mut tokens = args.tokens.clone();
    auth::refuse_shared_secrets(&tokens)?;
    if tokens.is_empty() {
        let token = uuid::Uuid::new_v4().simple().to_string();
        eprintln!("idemkey-actix-notes: no --token given; actor `demo` has token {token}");
        tokens.push(("demo".to_owned(), token));
    }
    Ok(NotesConfig {
        tokens,
        mode: args.mode,
        retention: args.retention,
        lease: args.lease,
        owner_grace,
        optional_key: args.optional_key,
        strategy: args.strategy,
        ..NotesConfig::default()
    })
}

async fn run<DB: NotesDb>(
    store: SqlxStore<DB>,
    config: NotesConfig,
    args: &ServeArgs,
) -> anyhow::Result<()> {
    DB::migrate_notes(store.pool()).await?;
    let listener = std::net::TcpListener::bind(args.listen)?;
    let addr = listener.local_addr()?;
    let executions = config.executions.clone();
    let mode = config.mode;
    let server = app::server(store.clone(), config, listener, args.workers)?;
    println!(
        "idemkey-actix-notes: listening on http://{addr} ({mode} mode, {})",
        redact(&args.database_url)
    );
    std::io::stdout().flush()?;
    // actix stops on SIGTERM and Ctrl-C, letting requests in progress finish.
    server.await?;
    // Handlers whose clients left still run in their own tasks: let them store or commit.
    executions.wait().await;
    store.close().await;
    tracing::info!("stopped");
    Ok(())
}
