//! An order consumer that ships each order once: it reads JSON orders `{"order_id": ...}`
//! from the JetStream stream `orders`, or the RabbitMQ queue `orders` (created if missing),
//! inserts one row per execution into `shipments` (no unique constraint on `order_id`, so a
//! duplicate would show), and publishes `{"order_id": ...}` to `shipped`. Each message needs
//! an id: `Nats-Msg-Id` on JetStream, the `message-id` property on RabbitMQ. On RabbitMQ,
//! `orders` is a quorum queue whose rejected messages go to `orders.dead`.
//!
//! In atomic mode (the default) the shipment commits with the message's record, and
//! `shipped` goes through the outbox. In lease mode the shipment stands for an external
//! effect: it is written outside the record's transaction, once by a key derived from the
//! record (the table's unique `ref`), and `shipped` is published under a derived key as its id.
//!
//! ```sh
//! cargo run -p idemkey-inbox --example orders -- --broker nats://127.0.0.1:4222 \
//!     --database-url sqlite://orders.db --mode atomic
//! cargo run -p idemkey-inbox --example orders -- --broker amqp://guest:guest@127.0.0.1:5672 \
//!     --database-url postgres://postgres@127.0.0.1:5432/test --mode lease
//! ```
//!
//! It prints one line when it is ready and exits cleanly on SIGTERM or Ctrl-C.

mod brokers;
mod ship;

use std::time::Duration;

use anyhow::bail;
use clap::Parser;
use idemkey_core::{Operation, Store};
use idemkey_inbox::{Inbox, LeaseInbox, OutboxDb, Publisher, Relay, amqp, nats};
use idemkey_sqlx::{MySqlStore, PgStore, SqliteStore, SqlxStore};
use sqlx::{MySql, Pool, Postgres, Sqlite};

use crate::brokers::{Amqp, Nats};
use crate::ship::{SHIPMENTS, Ship, ShipOnce, Sql};

#[derive(Debug, Parser)]
#[command(about = "Ships each order of the stream or queue `orders` once.")]
struct Args {
    /// The broker: nats://HOST:PORT or amqp://USER:PASS@HOST:PORT.
    #[arg(long)]
    broker: String,
    /// Where records, outbox and shipments live: sqlite://FILE, postgres://... or mysql://...
    #[arg(long, default_value = "sqlite://orders.db")]
    database_url: String,
    /// The inbox's mode: atomic (the record commits with the shipment) or lease (the
    /// shipment as an external effect, under derived keys).
    #[arg(long, default_value = "atomic", value_parser = ["atomic", "lease"])]
    mode: String,
    /// How long JetStream waits for a delivery's acknowledgement before delivering it again,
    /// in milliseconds, when the consumer `shipper` is created; in lease mode, the lease too.
    #[arg(long, default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(100..))]
    ack_wait_ms: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    if !args.broker.starts_with("nats://") && !args.broker.starts_with("amqp://") {
        bail!(
            "--broker: expected nats://HOST:PORT or amqp://USER:PASS@HOST:PORT, got {}",
            args.broker
        );
    }
    let url = args.database_url.as_str();
    if url.starts_with("postgres") {
        let sql = Sql {
            insert: "INSERT INTO shipments (order_id, shipped_at) VALUES ($1, $2)",
            insert_once: "INSERT INTO shipments (order_id, shipped_at, ref) VALUES ($1, $2, $3) \
                          ON CONFLICT (ref) DO NOTHING",
        };
        run::<Postgres>(&args, PgStore::connect(url).await?, sql).await
    } else if url.starts_with("sqlite:") {
        let sql = Sql {
            insert: "INSERT INTO shipments (order_id, shipped_at) VALUES (?1, ?2)",
            insert_once: "INSERT INTO shipments (order_id, shipped_at, ref) VALUES (?1, ?2, ?3) \
                          ON CONFLICT (ref) DO NOTHING",
        };
        run::<Sqlite>(&args, SqliteStore::connect(url).await?, sql).await
    } else if url.starts_with("mysql:") {
        let sql = Sql {
            insert: "INSERT INTO shipments (order_id, shipped_at) VALUES (?, ?)",
            insert_once: "INSERT IGNORE INTO shipments (order_id, shipped_at, ref) VALUES (?, ?, ?)",
        };
        run::<MySql>(&args, MySqlStore::connect(url).await?, sql).await
    } else {
        bail!("--database-url: expected sqlite://FILE, postgres://... or mysql://..., got {url}")
    }
}

/// Sets up the table, the broker's side and the inbox of the mode, then consumes until
/// SIGTERM or Ctrl-C.
async fn run<DB>(args: &Args, store: SqlxStore<DB>, sql: Sql) -> anyhow::Result<()>
where
    DB: OutboxDb,
    Ship: amqp::Handler<DB> + nats::Handler<DB>,
    ShipOnce<DB, nats::JetStreamPublisher>: nats::LeaseHandler,
    ShipOnce<DB, amqp::AmqpPublisher>: amqp::LeaseHandler,
    for<'c> &'c Pool<DB>: sqlx::Executor<'c, Database = DB>,
    <DB as sqlx::Database>::Arguments: sqlx::IntoArguments<DB>,
{
    sqlx::query(SHIPMENTS).execute(store.pool()).await?;
    let operation = Operation::new("ship-order", "v1");
    let ack_wait = Duration::from_millis(args.ack_wait_ms);
    let lease = args.mode == "lease";
    if args.broker.starts_with("amqp://") {
        run_amqp(args, &store, sql, operation, ack_wait).await?;
    } else {
        let nats = first_connection(|| Nats::connect(&args.broker, ack_wait)).await?;
        let mut settings = nats::ConsumerSettings::default();
        // Below the acknowledgement wait, so that a delivery still running is not delivered
        // again.
        settings.progress_every = (ack_wait / 3).max(Duration::from_millis(50));
        let consumed = if lease {
            let inbox = LeaseInbox::new(store.clone(), "shipper", operation).with_lease(ack_wait);
            let handler = ShipOnce {
                sql,
                pool: store.pool().clone(),
                publisher: nats.publisher,
            };
            let sweeping = tokio::spawn(sweep_records(store.clone()));
            ready(args);
            let consumed =
                nats::consume_lease(&nats.consumer, &inbox, &settings, &handler, stopped()).await;
            sweeping.abort();
            consumed
        } else {
            let inbox = Inbox::new(store.clone(), "shipper", operation);
            inbox.migrate().await?;
            let relay = Relay::new(store.clone(), nats.publisher);
            let sweeping = background(&store, &relay);
            ready(args);
            let consumed = nats::consume(
                &nats.consumer,
                &inbox,
                &relay,
                &settings,
                &Ship(sql),
                stopped(),
            )
            .await;
            sweeping.abort();
            consumed
        };
        consumed.map_err(|e| anyhow::anyhow!("consuming: {e}"))?;
    }
    store.close().await;
    Ok(())
}

/// Consumes from RabbitMQ, connecting again whenever the connection closes (a broker
/// restart), until SIGTERM or Ctrl-C. The first connection's failure is the command's error.
async fn run_amqp<DB>(
    args: &Args,
    store: &SqlxStore<DB>,
    sql: Sql,
    operation: Operation,
    ack_wait: Duration,
) -> anyhow::Result<()>
where
    DB: OutboxDb,
    Ship: amqp::Handler<DB>,
    ShipOnce<DB, amqp::AmqpPublisher>: amqp::LeaseHandler,
{
    let stop = Stop::on_signal();
    let settings = amqp::ConsumerSettings::default();
    let records = tokio::spawn(sweep_records(store.clone()));
    let mut amqp = first_connection(|| Amqp::connect(&args.broker, 16)).await?;
    ready(args);
    loop {
        if args.mode == "lease" {
            let inbox =
                LeaseInbox::new(store.clone(), "shipper", operation.clone()).with_lease(ack_wait);
            let handler = ShipOnce {
                sql,
                pool: store.pool().clone(),
                publisher: amqp.publisher,
            };
            amqp::consume_lease(amqp.deliveries, &inbox, &settings, &handler, stop.wait()).await;
        } else {
            let inbox = Inbox::new(store.clone(), "shipper", operation.clone());
            inbox.migrate().await?;
            let relay = Relay::new(store.clone(), amqp.publisher);
            let outbox = relay.clone();
            let relaying = tokio::spawn(async move {
                outbox
                    .run(Duration::from_secs(5), std::future::pending())
                    .await;
            });
            amqp::consume(
                amqp.deliveries,
                &inbox,
                &relay,
                &settings,
                &Ship(sql),
                stop.wait(),
            )
            .await;
            relaying.abort();
        }
        if stop.is_set() {
            break;
        }
        amqp = loop {
            tracing::warn!("the connection to RabbitMQ closed: connecting again");
            tokio::select! {
                () = stop.wait() => {
                    records.abort();
                    return Ok(());
                }
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
            match Amqp::connect(&args.broker, 16).await {
                Ok(amqp) => break amqp,
                Err(error) => {
                    tracing::warn!(error = format!("{error:#}"), "connecting to RabbitMQ")
                }
            }
        };
    }
    records.abort();
    Ok(())
}

/// The broker's side set up by `connect`, tried again for up to 30 s: a broker that is
/// starting (or restarting) takes connections before its queues are ready. Its last error
/// after that.
async fn first_connection<T, F>(connect: impl Fn() -> F) -> anyhow::Result<T>
where
    F: std::future::Future<Output = anyhow::Result<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match connect().await {
            Ok(connected) => return Ok(connected),
            Err(error) if tokio::time::Instant::now() < deadline => {
                tracing::warn!(
                    error = format!("{error:#}"),
                    "setting up the broker's side: trying again"
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(error) => return Err(error),
        }
    }
}

/// SIGTERM or Ctrl-C, seen by every wait on it, however many.
#[derive(Clone)]
struct Stop(tokio::sync::watch::Receiver<bool>);

impl Stop {
    fn on_signal() -> Self {
        let (tx, rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            stopped().await;
            let _ = tx.send(true);
        });
        Self(rx)
    }

    /// Completes once stopped.
    async fn wait(&self) {
        let mut rx = self.0.clone();
        let _ = rx.wait_for(|stopped| *stopped).await;
    }

    fn is_set(&self) -> bool {
        *self.0.borrow()
    }
}

/// The one line that says the consumer is ready.
fn ready(args: &Args) {
    println!(
        "ready: shipping orders from {} into {} ({} mode)",
        redacted(&args.broker),
        args.database_url,
        args.mode
    );
}

/// In the background: the outbox's relay every 5 s, for what a crash left unpublished, and
/// the records past their retention deleted every minute.
fn background<DB, P>(store: &SqlxStore<DB>, relay: &Relay<DB, P>) -> tokio::task::JoinHandle<()>
where
    DB: OutboxDb,
    P: Publisher + Clone + 'static,
{
    let relay = relay.clone();
    let records = sweep_records(store.clone());
    tokio::spawn(async move {
        let outbox = relay.run(Duration::from_secs(5), std::future::pending());
        tokio::join!(outbox, records);
    })
}

/// Deletes the records past their retention, every minute, for ever.
async fn sweep_records<DB: OutboxDb>(store: SqlxStore<DB>) {
    let mut ticks = tokio::time::interval(Duration::from_secs(60));
    loop {
        ticks.tick().await;
        if let Err(error) = store.sweep(1000).await {
            tracing::warn!(%error, "sweeping expired records");
        }
    }
}

/// The broker's URL without its credentials.
fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://***{}", &url[..scheme], &url[at..])
        }
        _ => url.to_owned(),
    }
}

/// Completes on SIGTERM or Ctrl-C.
async fn stopped() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
