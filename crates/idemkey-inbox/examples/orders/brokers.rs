//! The brokers' side: the streams or queues the example reads and writes, created if missing.

use std::time::Duration;

use anyhow::Context as _;
use idemkey_inbox::amqp::AmqpPublisher;
use idemkey_inbox::async_nats::jetstream::{self, consumer::PullConsumer, consumer::pull, stream};
use idemkey_inbox::lapin;
use idemkey_inbox::lapin::options::{
    BasicConsumeOptions, BasicQosOptions, ConfirmSelectOptions, QueueDeclareOptions,
};
use idemkey_inbox::lapin::types::{AMQPValue, FieldTable};
use idemkey_inbox::nats::JetStreamPublisher;

/// JetStream: the streams `orders` and `shipped`, the durable pull consumer `shipper`.
pub(crate) struct Nats {
    pub(crate) publisher: JetStreamPublisher,
    pub(crate) consumer: PullConsumer,
}

impl Nats {
    pub(crate) async fn connect(url: &str, ack_wait: Duration) -> anyhow::Result<Self> {
        let client = idemkey_inbox::async_nats::connect(url)
            .await
            .with_context(|| format!("connecting to {url}"))?;
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
        let config = pull::Config {
            durable_name: Some("shipper".to_owned()),
            ack_wait,
            ..Default::default()
        };
        let consumer = js
            .get_stream("orders")
            .await
            .map_err(|e| anyhow::anyhow!("stream orders: {e}"))?
            .get_or_create_consumer("shipper", config)
            .await
            .map_err(|e| anyhow::anyhow!("consumer shipper: {e}"))?;
        Ok(Self {
            publisher: JetStreamPublisher::new(js),
            consumer,
        })
    }
}

/// RabbitMQ: the quorum queue `orders` (rejected messages to `orders.dead`), `orders.dead`,
/// `shipped`; a publisher with confirms, a consumer of `orders` with a prefetch of
/// `prefetch`.
pub(crate) struct Amqp {
    pub(crate) publisher: AmqpPublisher,
    pub(crate) deliveries: lapin::Consumer,
}

impl Amqp {
    pub(crate) async fn connect(url: &str, prefetch: u16) -> anyhow::Result<Self> {
        let connection = lapin::Connection::connect(url, lapin::ConnectionProperties::default())
            .await
            .with_context(|| format!("connecting to {}", crate::redacted(url)))?;
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
            declare(&connection, name, arguments).await?;
        }
        let publishing = connection.create_channel().await?;
        publishing
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        let consuming = connection.create_channel().await?;
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
        Ok(Self {
            publisher: AmqpPublisher::new(publishing),
            deliveries,
        })
    }
}

/// Declares the durable queue `name` with `arguments`, or, when a queue of that name exists
/// with other arguments (a publisher declared it first), takes it as it is: on a classic queue
/// only whether a message was redelivered is known, and a rejected message is dropped unless
/// the queue has a dead-letter exchange.
async fn declare(
    connection: &lapin::Connection,
    name: &str,
    arguments: FieldTable,
) -> anyhow::Result<()> {
    let durable = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    // A refused declaration closes its channel: each try has one of its own.
    let declared = connection
        .create_channel()
        .await?
        .queue_declare(name.into(), durable, arguments)
        .await;
    if let Err(error) = declared {
        tracing::warn!(%error, queue = name, "the queue exists with other arguments: using it as it is");
        let passive = QueueDeclareOptions {
            passive: true,
            ..Default::default()
        };
        connection
            .create_channel()
            .await?
            .queue_declare(name.into(), passive, FieldTable::default())
            .await
            .with_context(|| format!("queue {name}"))?;
    }
    Ok(())
}
