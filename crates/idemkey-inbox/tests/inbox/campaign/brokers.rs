//! The campaign's broker of its own, JetStream or RabbitMQ: started, crashed and restarted,
//! published to as a publisher that retries until the broker confirms, and read downstream.

use std::collections::HashMap;
use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::{self, Context};
use idemkey_inbox::amqp::AmqpPublisher;
use idemkey_inbox::lapin::options::{BasicGetOptions, ConfirmSelectOptions};
use idemkey_inbox::lapin::types::ShortString;
use idemkey_inbox::lapin::{Channel, Connection, ConnectionProperties};
use idemkey_inbox::{Outgoing, Publisher};
use idemkey_test_support::process::nats_server::NatsServer;
use idemkey_test_support::process::rabbitmq_node::RabbitNode;

/// Which broker a campaign runs on.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    JetStream,
    Rabbitmq,
}

/// A broker of the campaign's own.
pub enum Broker {
    JetStream(NatsServer),
    Rabbitmq(RabbitNode),
}

impl Broker {
    pub fn start(kind: Kind) -> Self {
        match kind {
            Kind::JetStream => Self::JetStream(NatsServer::start()),
            Kind::Rabbitmq => Self::Rabbitmq(RabbitNode::start()),
        }
    }

    pub fn url(&self) -> String {
        match self {
            Self::JetStream(server) => server.url(),
            Self::Rabbitmq(node) => node.url(),
        }
    }

    /// Once the consumer has declared its queues: on RabbitMQ, a clean stop and start before
    /// the first crash, without which a crash can leave the fresh quorum queue without a
    /// leader for good (see [`RabbitNode::stop_and_restart`]).
    pub fn settle(&mut self) {
        if let Self::Rabbitmq(node) = self {
            node.stop_and_restart();
        }
    }

    /// A crash: SIGKILL, then the same broker again on its store and port.
    pub fn crash_restart(&mut self) {
        match self {
            Self::JetStream(server) => server.crash_restart(),
            Self::Rabbitmq(node) => node.crash_restart(),
        }
    }
}

/// Publishes the orders, each under its id, until the broker confirms it.
pub enum Orders {
    JetStream {
        url: String,
    },
    Rabbitmq {
        url: String,
        channel: Option<Channel>,
    },
}

impl Orders {
    pub fn new(kind: Kind, url: String) -> Self {
        match kind {
            Kind::JetStream => Self::JetStream { url },
            Kind::Rabbitmq => Self::Rabbitmq { url, channel: None },
        }
    }

    /// Publishes order `n` under the id `order-n`, again until the broker confirms it (a
    /// broker restart in between is a publish that failed, or that succeeded and lost its
    /// confirm: the consumer then sees the id twice).
    pub async fn publish(&mut self, n: u64) {
        let payload = format!(r#"{{"order_id":{n}}}"#).into_bytes();
        let id = format!("order-{n}");
        loop {
            let published = match self {
                Self::JetStream { url } => publish_jetstream(url, &id, payload.clone()).await,
                Self::Rabbitmq { url, channel } => publish_amqp(url, channel, &id, &payload).await,
            };
            if published {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

async fn publish_jetstream(url: &str, id: &str, payload: Vec<u8>) -> bool {
    let Ok(js) = jetstream_of(url).await else {
        return false;
    };
    let mut headers = HeaderMap::new();
    headers.insert("Nats-Msg-Id", id);
    let Ok(ack) = js
        .publish_with_headers("orders", headers, payload.into())
        .await
    else {
        return false;
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(2), ack).await,
        Ok(Ok(_))
    )
}

/// One publish on `channel`, opened (with confirms) if there is none, through the outbox's
/// own `AmqpPublisher` (persistent, mandatory, confirmed: a node still recovering its queues
/// returns a message no queue took, a publish to make again); a failure drops the channel.
async fn publish_amqp(url: &str, channel: &mut Option<Channel>, id: &str, payload: &[u8]) -> bool {
    if channel.is_none() {
        *channel = confirming_channel(url).await;
    }
    let Some(open) = channel else {
        return false;
    };
    let order = Outgoing {
        id: id.to_owned(),
        subject: "orders".to_owned(),
        payload: payload.to_vec(),
    };
    let publisher = AmqpPublisher::new(open.clone());
    let acked = matches!(
        tokio::time::timeout(Duration::from_secs(5), publisher.publish(&order)).await,
        Ok(Ok(()))
    );
    if !acked {
        *channel = None;
    }
    acked
}

async fn confirming_channel(url: &str) -> Option<Channel> {
    let connection = Connection::connect(url, ConnectionProperties::default())
        .await
        .ok()?;
    let channel = connection.create_channel().await.ok()?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .ok()?;
    Some(channel)
}

pub async fn jetstream_of(url: &str) -> Result<Context, async_nats::ConnectError> {
    Ok(jetstream::new(async_nats::connect(url).await?))
}

/// What the campaign sees downstream, in `shipped`: messages, and distinct message ids.
/// JetStream keeps one message per id (its duplicate window); from RabbitMQ, which
/// deduplicates nothing, every message is taken off the queue and its id counted, as a
/// downstream consumer that deduplicates by id would.
#[derive(Default)]
pub struct Downstream {
    seen: HashMap<String, u64>,
}

impl Downstream {
    /// Reads what arrived since the last call; `None` while the broker cannot be read.
    pub async fn read(&mut self, broker: &Broker) -> Option<(u64, u64)> {
        match broker {
            Broker::JetStream(server) => {
                let js = jetstream_of(&server.url()).await.ok()?;
                let mut stream = js.get_stream("shipped").await.ok()?;
                let messages = stream.info().await.ok()?.state.messages;
                Some((messages, messages))
            }
            Broker::Rabbitmq(node) => {
                self.drain(&node.url()).await?;
                let messages = self.seen.values().sum();
                Some((messages, self.seen.len() as u64))
            }
        }
    }

    async fn drain(&mut self, url: &str) -> Option<()> {
        let connection = Connection::connect(url, ConnectionProperties::default())
            .await
            .ok()?;
        let channel = connection.create_channel().await.ok()?;
        let take = BasicGetOptions { no_ack: true };
        while let Some(got) = channel
            .basic_get(ShortString::from("shipped"), take)
            .await
            .ok()?
        {
            let id = got.delivery.properties.message_id().as_ref();
            let id = id.map_or_else(|| "(none)".to_owned(), |id| id.as_str().to_owned());
            *self.seen.entry(id).or_default() += 1;
        }
        let _ = connection.close(200, ShortString::from("done")).await;
        Some(())
    }
}
