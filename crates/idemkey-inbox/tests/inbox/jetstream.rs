//! A JetStream pull consumer through the inbox, on the NATS server of the tests: each order
//! shipped once however often it is published and delivered, its outbox message downstream
//! once, reused and missing ids terminated, and what a crash leaves in the outbox published
//! by the relay's sweep, once.

use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::consumer::{PullConsumer, pull};
use async_nats::jetstream::{self, Context, stream};
use idemkey_inbox::nats::{self, ConsumerSettings, JetStreamPublisher};
use idemkey_inbox::{Action, Inbox, Incoming, OutboxDb, Relay};
use sqlx::{Postgres, Sqlite};
use tokio::sync::oneshot;

use crate::common::{pg_inbox, shipped, sqlite_inbox, unique};

/// The header the tests' publishers put the order's id in: JetStream does not deduplicate by
/// it, so a republish reaches the consumer and the inbox must catch it.
const ORDER_ID: &str = "Order-Id";

/// A stream of orders and one of shipments, named for this test, and a consumer of the
/// orders whose acknowledgement wait is `ack_wait`.
struct Streams {
    js: Context,
    orders: String,
    shipped: String,
    consumer: PullConsumer,
}

async fn streams(ack_wait: Duration) -> Streams {
    let url = idemkey_test_support::runner::needs::nats_url();
    let js = jetstream::new(async_nats::connect(url).await.unwrap());
    let (orders, shipped) = (unique("orders"), unique("shipped"));
    for name in [&orders, &shipped] {
        js.create_stream(stream::Config {
            name: name.clone(),
            subjects: vec![name.clone()],
            ..Default::default()
        })
        .await
        .unwrap();
    }
    let consumer = js
        .get_stream(&orders)
        .await
        .unwrap()
        .create_consumer(pull::Config {
            durable_name: Some("shipper".into()),
            ack_wait,
            ..Default::default()
        })
        .await
        .unwrap();
    Streams {
        js,
        orders,
        shipped,
        consumer,
    }
}

impl Streams {
    /// Publishes order `n` with `payload`, its id in [`ORDER_ID`] (none when `id` is `None`).
    async fn publish(&self, id: Option<&str>, payload: &str) {
        let mut headers = HeaderMap::new();
        if let Some(id) = id {
            headers.insert(ORDER_ID, id);
        }
        let payload = payload.to_owned().into_bytes().into();
        let ack = self
            .js
            .publish_with_headers(self.orders.clone(), headers, payload)
            .await
            .unwrap();
        ack.await.unwrap();
    }

    /// The messages in the shipments stream.
    async fn shipped_count(&self) -> u64 {
        let mut stream = self.js.get_stream(&self.shipped).await.unwrap();
        stream.info().await.unwrap().state.messages
    }

    /// Deletes both streams: the server is shared.
    async fn delete(&self) {
        for name in [&self.orders, &self.shipped] {
            self.js.delete_stream(name).await.unwrap();
        }
    }

    /// Deliveries of the orders' consumer not yet acknowledged or terminated.
    async fn unsettled(&self) -> u64 {
        let mut consumer = self.consumer.clone();
        let info = consumer.info().await.unwrap();
        info.num_ack_pending as u64 + info.num_pending
    }
}

fn settings() -> ConsumerSettings {
    let mut settings = ConsumerSettings::default();
    settings.id_header = ORDER_ID.to_owned();
    settings.concurrency = 4;
    settings
}

/// Waits for `done`, checked every 50 ms; fails after a minute.
async fn eventually<F: std::future::Future<Output = bool>>(
    what: &str,
    mut done: impl FnMut() -> F,
) {
    for _ in 0..1200 {
        if done().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("not within a minute: {what}");
}

/// Inserts the order with `insert`, publishes it to `shipped` and, on the first delivery of
/// `slow`, runs longer than the acknowledgement wait, so that JetStream delivers it again
/// while it runs.
struct Ship {
    insert: &'static str,
    shipped: String,
    slow: &'static str,
}

impl<DB> nats::Handler<DB> for Ship
where
    DB: OutboxDb,
    for<'c> &'c mut <DB as sqlx::Database>::Connection: sqlx::Executor<'c, Database = DB>,
    for<'q> String: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    <DB as sqlx::Database>::Arguments: sqlx::IntoArguments<DB>,
{
    async fn handle(
        &self,
        message: &jetstream::Message,
        tx: &mut sqlx::Transaction<'static, DB>,
        outbox: &mut idemkey_inbox::Outbox,
    ) -> Result<(), idemkey_inbox::BoxError> {
        let order = String::from_utf8_lossy(&message.payload).into_owned();
        let first = message.info().map(|i| i.delivered == 1).unwrap_or(true);
        if order == self.slow && first {
            tokio::time::sleep(Duration::from_millis(1500)).await;
        }
        sqlx::query(self.insert)
            .bind(order.clone())
            .execute(&mut **tx)
            .await?;
        outbox.publish(self.shipped.clone(), order.into_bytes());
        Ok(())
    }
}

/// The consumer of `streams` through `inbox` with [`Ship`] until the returned sender is
/// dropped or used.
fn run_consumer<DB>(
    streams: &Streams,
    inbox: Inbox<DB>,
    insert: &'static str,
    slow: &'static str,
) -> (oneshot::Sender<()>, tokio::task::JoinHandle<()>)
where
    DB: OutboxDb,
    for<'c> &'c mut <DB as sqlx::Database>::Connection: sqlx::Executor<'c, Database = DB>,
    for<'q> String: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    <DB as sqlx::Database>::Arguments: sqlx::IntoArguments<DB>,
{
    let (stop, stopped) = oneshot::channel::<()>();
    let consumer = streams.consumer.clone();
    let relay = Relay::new(
        inbox.store().clone(),
        JetStreamPublisher::new(streams.js.clone()),
    );
    let handler = Ship {
        insert,
        shipped: streams.shipped.clone(),
        slow,
    };
    let task = tokio::spawn(async move {
        let stop = async {
            let _ = stopped.await;
        };
        nats::consume(&consumer, &inbox, &relay, &settings(), &handler, stop)
            .await
            .unwrap();
    });
    (stop, task)
}

/// 20 orders, 5 of them published twice under their id, order `o-0` slow: each shipped once,
/// each published downstream once, nothing left unsettled.
async fn each_order_once<DB>(
    inbox: Inbox<DB>,
    insert: &'static str,
    count: impl Fn(Inbox<DB>) -> futures_util::future::BoxFuture<'static, Vec<String>>,
) where
    DB: OutboxDb,
    for<'c> &'c mut <DB as sqlx::Database>::Connection: sqlx::Executor<'c, Database = DB>,
    for<'q> String: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    <DB as sqlx::Database>::Arguments: sqlx::IntoArguments<DB>,
{
    let streams = streams(Duration::from_secs(1)).await;
    let (stop, task) = run_consumer(&streams, inbox.clone(), insert, "o-0");
    for n in 0..20 {
        let order = format!("o-{n}");
        streams.publish(Some(&format!("m-{n}")), &order).await;
        if n % 4 == 0 {
            streams.publish(Some(&format!("m-{n}")), &order).await;
        }
    }

    eventually("20 orders shipped downstream", || async {
        streams.shipped_count().await >= 20
    })
    .await;
    eventually("every delivery settled", || async {
        streams.unsettled().await == 0
    })
    .await;
    let _ = stop.send(());
    task.await.unwrap();

    let mut rows = count(inbox).await;
    rows.sort();
    let mut expected: Vec<String> = (0..20).map(|n| format!("o-{n}")).collect();
    expected.sort();
    assert_eq!(rows, expected, "an order shipped twice or not at all");
    assert_eq!(
        streams.shipped_count().await,
        20,
        "a shipment published twice"
    );
    assert_eq!(streams.unsettled().await, 0);
    streams.delete().await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [nats])]
async fn on_sqlite_each_order_is_shipped_once_and_published_once() {
    let dir = tempfile::tempdir().unwrap();
    let inbox = sqlite_inbox(&dir).await;
    each_order_once::<Sqlite>(
        inbox,
        "INSERT INTO shipments (order_id) VALUES (?1)",
        |inbox| Box::pin(async move { shipped(&inbox).await }),
    )
    .await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [nats, postgres])]
async fn on_postgres_each_order_is_shipped_once_and_published_once() {
    let table = unique("shipments");
    let inbox = pg_inbox(&table).await;
    let insert: &'static str = format!("INSERT INTO {table} (order_id) VALUES ($1)").leak();
    let select = format!("SELECT order_id FROM {table}");
    let pool = inbox.store().pool().clone();
    each_order_once::<Postgres>(inbox, insert, move |inbox| {
        let select = select.clone();
        Box::pin(async move {
            sqlx::query_scalar(sqlx::AssertSqlSafe(select))
                .fetch_all(inbox.store().pool())
                .await
                .unwrap()
        })
    })
    .await;
    let drop = format!("DROP TABLE {table}");
    sqlx::query(sqlx::AssertSqlSafe(drop))
        .execute(&pool)
        .await
        .unwrap();
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [nats])]
async fn reused_and_missing_ids_are_terminated_and_never_run() {
    let dir = tempfile::tempdir().unwrap();
    let inbox = sqlite_inbox(&dir).await;
    let streams = streams(Duration::from_secs(5)).await;
    let insert = "INSERT INTO shipments (order_id) VALUES (?1)";
    let (stop, task) = run_consumer(&streams, inbox.clone(), insert, "none");
    streams.publish(Some("m-1"), "o-1").await;
    eventually("the first order shipped", || async {
        shipped(&inbox).await.len() == 1
    })
    .await;
    streams.publish(Some("m-1"), "o-other").await;
    streams.publish(None, "o-anonymous").await;
    streams.publish(Some("m-2"), "o-2").await;

    eventually("the last order shipped", || async {
        shipped(&inbox).await.len() >= 2
    })
    .await;
    eventually("every delivery settled", || async {
        streams.unsettled().await == 0
    })
    .await;
    let _ = stop.send(());
    task.await.unwrap();
    assert_eq!(shipped(&inbox).await, ["o-1", "o-2"]);
    assert_eq!(streams.shipped_count().await, 2);
    streams.delete().await;
}

#[idemkey_test_support::test(needs = [nats])]
async fn what_a_crash_left_in_the_outbox_is_swept_out_once() {
    let dir = tempfile::tempdir().unwrap();
    let inbox = sqlite_inbox(&dir).await;
    let streams = streams(Duration::from_secs(5)).await;
    let ship = crate::common::Ship::default();
    let incoming = Incoming {
        id: Some("m-1"),
        subject: "orders",
        payload: b"o-1",
        headers: Vec::new(),
        delivered: 1,
    };
    // Committed, then "crashed": the outbox message was never published.
    let action = inbox.process(&incoming, ship.sqlite("o-1")).await;
    let Action::Ack { publish } = action else {
        panic!("{action:?}")
    };
    let mut message = publish[0].clone();
    message.subject = streams.shipped.clone();
    sqlx::query("UPDATE idemkey_outbox SET subject = ?1")
        .bind(&streams.shipped)
        .execute(inbox.store().pool())
        .await
        .unwrap();

    let relay = Relay::new(
        inbox.store().clone(),
        JetStreamPublisher::new(streams.js.clone()),
    );
    assert_eq!(relay.sweep(Duration::ZERO, 10).await.unwrap(), 1);
    assert_eq!(
        relay.sweep(Duration::ZERO, 10).await.unwrap(),
        0,
        "published twice"
    );
    // A relay that published and crashed before removing the row publishes it again: the
    // stream keeps one, by its Nats-Msg-Id.
    relay.publish(&[message]).await.unwrap();
    assert_eq!(streams.shipped_count().await, 1);
    streams.delete().await;
}
