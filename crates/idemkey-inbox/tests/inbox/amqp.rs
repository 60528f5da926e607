//! A RabbitMQ consumer through the inbox, on the RabbitMQ server of the tests: each order
//! shipped once though a fifth are published twice (RabbitMQ deduplicates nothing), its outbox
//! message in the downstream queue once, a reused id and a missing id rejected to the
//! dead-letter queue.

use std::time::Duration;

use idemkey_inbox::amqp::{self, AmqpPublisher, ConsumerSettings};
use idemkey_inbox::lapin::options::{
    BasicConsumeOptions, BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions,
    QueueDeclareOptions, QueueDeleteOptions,
};
use idemkey_inbox::lapin::types::{AMQPValue, FieldTable, ShortString};
use idemkey_inbox::lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use idemkey_inbox::{BoxError, Relay};
use sqlx::Sqlite;
use tokio::sync::oneshot;

use crate::common::{shipped, sqlite_inbox, unique};

/// Inserts the order and publishes it to `shipped`.
struct Ship {
    shipped: String,
}

impl amqp::Handler<Sqlite> for Ship {
    async fn handle(
        &self,
        delivery: &idemkey_inbox::lapin::message::Delivery,
        tx: &mut sqlx::Transaction<'static, Sqlite>,
        outbox: &mut idemkey_inbox::Outbox,
    ) -> Result<(), BoxError> {
        let order = String::from_utf8_lossy(&delivery.data).into_owned();
        sqlx::query("INSERT INTO shipments (order_id) VALUES (?1)")
            .bind(&order)
            .execute(&mut **tx)
            .await?;
        outbox.publish(self.shipped.clone(), order.into_bytes());
        Ok(())
    }
}

async fn declare(channel: &Channel, name: &str, arguments: FieldTable) {
    let durable = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    channel
        .queue_declare(ShortString::from(name), durable, arguments)
        .await
        .unwrap();
}

/// The messages ready in queue `name`.
async fn ready(channel: &Channel, name: &str) -> u32 {
    let passive = QueueDeclareOptions {
        passive: true,
        durable: true,
        ..Default::default()
    };
    let queue = channel
        .queue_declare(ShortString::from(name), passive, FieldTable::default())
        .await
        .unwrap();
    queue.message_count()
}

async fn publish(channel: &Channel, queue: &str, id: Option<&str>, payload: &str) {
    let mut properties = BasicProperties::default().with_delivery_mode(2);
    if let Some(id) = id {
        properties = properties.with_message_id(ShortString::from(id));
    }
    channel
        .basic_publish(
            ShortString::from(""),
            ShortString::from(queue),
            BasicPublishOptions::default(),
            payload.as_bytes(),
            properties,
        )
        .await
        .unwrap()
        .await
        .unwrap();
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [rabbitmq])]
async fn on_rabbitmq_each_order_is_shipped_once_and_impostors_are_dead_lettered() {
    let url = idemkey_test_support::runner::needs::amqp_url();
    let connection = Connection::connect(&url, ConnectionProperties::default())
        .await
        .unwrap();
    let (orders, dead, shipped_queue) = (unique("orders"), unique("dead"), unique("shipped"));
    let setup = connection.create_channel().await.unwrap();
    let mut arguments = FieldTable::default();
    arguments.insert(
        "x-queue-type".into(),
        AMQPValue::LongString("quorum".into()),
    );
    arguments.insert(
        "x-dead-letter-exchange".into(),
        AMQPValue::LongString("".into()),
    );
    arguments.insert(
        "x-dead-letter-routing-key".into(),
        AMQPValue::LongString(dead.as_str().into()),
    );
    declare(&setup, &orders, arguments).await;
    declare(&setup, &dead, FieldTable::default()).await;
    declare(&setup, &shipped_queue, FieldTable::default()).await;
    setup
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let inbox = sqlite_inbox(&dir).await;
    let consuming = connection.create_channel().await.unwrap();
    consuming
        .basic_qos(16, BasicQosOptions::default())
        .await
        .unwrap();
    let deliveries = consuming
        .basic_consume(
            ShortString::from(orders.as_str()),
            ShortString::from("shipper"),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let publishing = connection.create_channel().await.unwrap();
    publishing
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let relay = Relay::new(inbox.store().clone(), AmqpPublisher::new(publishing));
    let handler = Ship {
        shipped: shipped_queue.clone(),
    };
    let (stop, stopped) = oneshot::channel::<()>();
    let task = {
        let inbox = inbox.clone();
        tokio::spawn(async move {
            let stop = async {
                let _ = stopped.await;
            };
            amqp::consume(
                deliveries,
                &inbox,
                &relay,
                &ConsumerSettings::default(),
                &handler,
                stop,
            )
            .await;
        })
    };

    for n in 0..20 {
        let (id, order) = (format!("m-{n}"), format!("o-{n}"));
        publish(&setup, &orders, Some(&id), &order).await;
        if n % 5 == 0 {
            publish(&setup, &orders, Some(&id), &order).await;
        }
    }
    publish(&setup, &orders, Some("m-1"), "o-impostor").await;
    publish(&setup, &orders, None, "o-anonymous").await;

    let mut settled = false;
    for _ in 0..1200 {
        let done = shipped(&inbox).await.len() >= 20
            && ready(&setup, &shipped_queue).await >= 20
            && ready(&setup, &dead).await >= 2;
        if done {
            settled = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = stop.send(());
    task.await.unwrap();
    assert!(settled, "not settled within a minute");
    let mut rows = shipped(&inbox).await;
    rows.sort();
    let mut expected: Vec<String> = (0..20).map(|n| format!("o-{n}")).collect();
    expected.sort();
    assert_eq!(rows, expected);
    assert_eq!(
        ready(&setup, &shipped_queue).await,
        20,
        "a shipment published twice"
    );
    assert_eq!(
        ready(&setup, &dead).await,
        2,
        "the impostor and the anonymous order"
    );
    // The server is shared.
    for name in [&orders, &dead, &shipped_queue] {
        let name = ShortString::from(name.as_str());
        setup
            .queue_delete(name, QueueDeleteOptions::default())
            .await
            .unwrap();
    }
}

/// A message no queue takes is confirmed by RabbitMQ all the same; the publisher asks for it
/// back (`mandatory`) and fails, so the relay keeps its outbox row instead of removing it.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [rabbitmq])]
async fn a_message_no_queue_takes_is_a_failed_publish() {
    use idemkey_inbox::{Outgoing, Publisher};
    let url = idemkey_test_support::runner::needs::amqp_url();
    let connection = Connection::connect(&url, ConnectionProperties::default())
        .await
        .unwrap();
    let channel = connection.create_channel().await.unwrap();
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let publisher = AmqpPublisher::new(channel.clone());
    let queue = unique("nowhere");
    let message = Outgoing {
        id: "out-1".to_owned(),
        subject: queue.clone(),
        payload: b"{}".to_vec(),
    };
    let error = publisher.publish(&message).await.unwrap_err();
    assert!(error.to_string().contains("no queue took"), "{error}");

    // The channel stays usable, and once the queue is there the same message goes through.
    declare(&channel, &queue, FieldTable::default()).await;
    publisher.publish(&message).await.unwrap();
    assert_eq!(ready(&channel, &queue).await, 1);
    channel
        .queue_delete(
            ShortString::from(queue.as_str()),
            QueueDeleteOptions::default(),
        )
        .await
        .unwrap();
}
