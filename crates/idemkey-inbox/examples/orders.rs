//! An order consumer that ships each order once: it reads JSON orders `{"order_id": ...}`
//! from the JetStream stream `orders`, or the RabbitMQ queue `orders` (created if missing),
//! inserts one row per execution into `shipments` (no unique constraint on `order_id`, so a
//! duplicate would show), and publishes `{"order_id": ...}` to `shipped` through the outbox.
//! Each message needs an id: `Nats-Msg-Id` on JetStream, the `message-id` property on
//! RabbitMQ. On RabbitMQ, `orders` is a quorum queue whose rejected messages go to
//! `orders.dead`.
//!
//! ```sh
//! cargo run -p idemkey-inbox --example orders -- --broker nats://127.0.0.1:4222 \
//!     --database-url sqlite://orders.db --mode atomic
//! cargo run -p idemkey-inbox --example orders -- --broker amqp://guest:guest@127.0.0.1:5672 \
//!     --database-url postgres://postgres@127.0.0.1:5432/test
//! ```
//!
//! It prints one line when it is ready and exits cleanly on SIGTERM or Ctrl-C.

use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Parser;
use idemkey_core::{Operation, Store};
use idemkey_inbox::amqp::{self, AmqpPublisher};
use idemkey_inbox::async_nats::jetstream::{self, consumer::pull, stream};
use idemkey_inbox::lapin;
use idemkey_inbox::lapin::options::{
    BasicConsumeOptions, BasicQosOptions, ConfirmSelectOptions, QueueDeclareOptions,
};
use idemkey_inbox::lapin::types::{AMQPValue, FieldTable};
use idemkey_inbox::nats::{self, ConsumerSettings, JetStreamPublisher};
use idemkey_inbox::{BoxError, Inbox, Outbox, OutboxDb, Publisher, Relay};
use idemkey_sqlx::{MySqlStore, PgStore, SqliteStore, SqlxStore};
use serde_json::Value;
use sqlx::{MySql, Postgres, Sqlite, Transaction};

#[derive(Debug, Parser)]
#[command(about = "Ships each order of the JetStream stream `orders` once.")]
struct Args {
    /// The broker: nats://HOST:PORT or amqp://USER:PASS@HOST:PORT.
    #[arg(long)]
    broker: String,
    /// Where records, outbox and shipments live: sqlite://FILE, postgres://... or mysql://...
    #[arg(long, default_value = "sqlite://orders.db")]
    database_url: String,
    /// The inbox's mode: atomic (the record commits with the shipment).
    #[arg(long, default_value = "atomic", value_parser = ["atomic"])]
    mode: String,
    /// How long JetStream waits for a delivery's acknowledgement before delivering it again,
    /// in milliseconds, when the consumer `shipper` is created.
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
    if args.database_url.starts_with("postgres") {
        let store = PgStore::connect(&args.database_url).await?;
        run::<Postgres>(
            &args,
            store,
            "INSERT INTO shipments (order_id, shipped_at) VALUES ($1, $2)",
        )
        .await
    } else if args.database_url.starts_with("sqlite:") {
        let store = SqliteStore::connect(&args.database_url).await?;
        run::<Sqlite>(
            &args,
            store,
            "INSERT INTO shipments (order_id, shipped_at) VALUES (?1, ?2)",
        )
        .await
    } else if args.database_url.starts_with("mysql:") {
        let store = MySqlStore::connect(&args.database_url).await?;
        let insert = "INSERT INTO shipments (order_id, shipped_at) VALUES (?, ?)";
        run::<MySql>(&args, store, insert).await
    } else {
        bail!(
            "--database-url: expected sqlite://FILE, postgres://... or mysql://..., got {}",
            args.database_url
        )
    }
}

/// Sets up the streams, the tables and the consumer, then consumes until SIGTERM or Ctrl-C.
async fn run<DB>(args: &Args, store: SqlxStore<DB>, insert: &'static str) -> anyhow::Result<()>
where
    DB: OutboxDb,
    Ship: amqp::Handler<DB> + nats::Handler<DB>,
    for<'c> &'c mut <DB as sqlx::Database>::Connection: sqlx::Executor<'c, Database = DB>,
    for<'q> String: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    <DB as sqlx::Database>::Arguments: sqlx::IntoArguments<DB>,
{
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS shipments (order_id TEXT NOT NULL, shipped_at BIGINT NOT NULL)",
    )
    .execute(store.pool())
    .await?;
    let inbox = Inbox::new(store, "shipper", Operation::new("ship-order", "v1"));
    inbox.migrate().await?;
    let handler = Ship { insert };
    if args.broker.starts_with("amqp://") {
        return run_amqp(args, inbox, handler).await;
    }
    let client = idemkey_inbox::async_nats::connect(&args.broker)
        .await
        .with_context(|| format!("connecting to {}", args.broker))?;
    let js = jetstream::new(client);
    for name in ["orders", "shipped"] {
        js.get_or_create_stream(stream::Config {
            name: name.to_owned(),
            subjects: vec![name.to_owned()],
            ..Default::default()
        })
        .await
        .map_err(|e| anyhow::anyhow!("stream {name}: {e}"))?;
    }
    let consumer: jetstream::consumer::PullConsumer = js
        .get_stream("orders")
        .await
        .map_err(|e| anyhow::anyhow!("stream orders: {e}"))?
        .get_or_create_consumer(
            "shipper",
            pull::Config {
                durable_name: Some("shipper".to_owned()),
                ack_wait: Duration::from_millis(args.ack_wait_ms),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| anyhow::anyhow!("consumer shipper: {e}"))?;
    let relay = Relay::new(inbox.store().clone(), JetStreamPublisher::new(js.clone()));
    let sweeping = background(&inbox, &relay);
    println!(
        "ready: shipping orders from {} (stream orders, consumer shipper) into {} ({} mode)",
        args.broker, args.database_url, args.mode
    );
    let mut settings = ConsumerSettings::default();
    // Below the acknowledgement wait, so that a delivery still running is not delivered again.
    settings.progress_every =
        Duration::from_millis(args.ack_wait_ms / 3).max(Duration::from_millis(50));
    nats::consume(&consumer, &inbox, &relay, &settings, &handler, stopped())
        .await
        .map_err(|e| anyhow::anyhow!("consuming: {e}"))?;
    sweeping.abort();
    inbox.store().close().await;
    Ok(())
}

/// Declares the queues and consumes `orders` until SIGTERM or Ctrl-C.
async fn run_amqp<DB>(args: &Args, inbox: Inbox<DB>, handler: Ship) -> anyhow::Result<()>
where
    DB: OutboxDb,
    Ship: amqp::Handler<DB>,
{
    let connection =
        lapin::Connection::connect(&args.broker, lapin::ConnectionProperties::default())
            .await
            .with_context(|| format!("connecting to {}", redacted(&args.broker)))?;
    let setup = connection.create_channel().await?;
    let durable = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    let mut orders = FieldTable::default();
    orders.insert(
        "x-queue-type".into(),
        AMQPValue::LongString("quorum".into()),
    );
    orders.insert(
        "x-dead-letter-exchange".into(),
        AMQPValue::LongString("".into()),
    );
    let dead = AMQPValue::LongString("orders.dead".into());
    orders.insert("x-dead-letter-routing-key".into(), dead);
    let queues = [
        ("orders", orders),
        ("orders.dead", FieldTable::default()),
        ("shipped", FieldTable::default()),
    ];
    for (name, arguments) in queues {
        setup
            .queue_declare(name.into(), durable, arguments)
            .await
            .with_context(|| format!("queue {name}"))?;
    }
    let publishing = connection.create_channel().await?;
    publishing
        .confirm_select(ConfirmSelectOptions::default())
        .await?;
    let relay = Relay::new(inbox.store().clone(), AmqpPublisher::new(publishing));
    let sweeping = background(&inbox, &relay);
    let consuming = connection.create_channel().await?;
    let settings = amqp::ConsumerSettings::default();
    let prefetch = u16::try_from(settings.concurrency).unwrap_or(u16::MAX);
    consuming
        .basic_qos(prefetch, BasicQosOptions::default())
        .await?;
    let deliveries = consuming
        .basic_consume(
            "orders".into(),
            "shipper".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    println!(
        "ready: shipping orders from {} (queue orders) into {} ({} mode)",
        redacted(&args.broker),
        args.database_url,
        args.mode
    );
    amqp::consume(deliveries, &inbox, &relay, &settings, &handler, stopped()).await;
    sweeping.abort();
    inbox.store().close().await;
    Ok(())
}

/// In the background: the outbox's relay every 5 s, for what a crash left unpublished, and
/// the records past their retention deleted every minute.
fn background<DB, P>(inbox: &Inbox<DB>, relay: &Relay<DB, P>) -> tokio::task::JoinHandle<()>
where
    DB: OutboxDb,
    P: Publisher + Clone + 'static,
{
    let (relay, store) = (relay.clone(), inbox.store().clone());
    tokio::spawn(async move {
        let records = async {
            let mut ticks = tokio::time::interval(Duration::from_secs(60));
            loop {
                ticks.tick().await;
                if let Err(error) = store.sweep(1000).await {
                    tracing::warn!(%error, "sweeping expired records");
                }
            }
        };
        let outbox = relay.run(Duration::from_secs(5), std::future::pending());
        tokio::join!(outbox, records);
    })
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

/// Inserts a shipment for the order and publishes it to `shipped`.
struct Ship {
    insert: &'static str,
}

impl Ship {
    async fn ship<DB>(
        &self,
        payload: &[u8],
        tx: &mut Transaction<'static, DB>,
        outbox: &mut Outbox,
    ) -> Result<(), BoxError>
    where
        DB: OutboxDb,
        for<'c> &'c mut <DB as sqlx::Database>::Connection: sqlx::Executor<'c, Database = DB>,
        for<'q> String: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
        for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
        <DB as sqlx::Database>::Arguments: sqlx::IntoArguments<DB>,
    {
        let order: Value = serde_json::from_slice(payload)?;
        let id = match order.get("order_id") {
            Some(Value::String(id)) => id.clone(),
            Some(id @ Value::Number(_)) => id.to_string(),
            _ => return Err("the order has no order_id".into()),
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        sqlx::query(self.insert)
            .bind(id)
            .bind(now)
            .execute(&mut **tx)
            .await?;
        let shipped = serde_json::json!({ "order_id": order["order_id"] });
        outbox.publish("shipped", serde_json::to_vec(&shipped)?);
        Ok(())
    }
}

impl<DB> nats::Handler<DB> for Ship
where
    DB: OutboxDb,
    for<'c> &'c mut <DB as sqlx::Database>::Connection: sqlx::Executor<'c, Database = DB>,
    for<'q> String: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    <DB as sqlx::Database>::Arguments: sqlx::IntoArguments<DB>,
{
    async fn handle(
        &self,
        message: &jetstream::Message,
        tx: &mut Transaction<'static, DB>,
        outbox: &mut Outbox,
    ) -> Result<(), BoxError> {
        self.ship(&message.payload, tx, outbox).await
    }
}

impl<DB> amqp::Handler<DB> for Ship
where
    DB: OutboxDb,
    for<'c> &'c mut <DB as sqlx::Database>::Connection: sqlx::Executor<'c, Database = DB>,
    for<'q> String: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    <DB as sqlx::Database>::Arguments: sqlx::IntoArguments<DB>,
{
    async fn handle(
        &self,
        delivery: &lapin::message::Delivery,
        tx: &mut Transaction<'static, DB>,
        outbox: &mut Outbox,
    ) -> Result<(), BoxError> {
        self.ship(&delivery.data, tx, outbox).await
    }
}
