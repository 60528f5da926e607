//! The business: a shipment row per order, and a `shipped` message.

use idemkey_core::DerivedKeys;
use idemkey_inbox::async_nats::jetstream;
use idemkey_inbox::lapin::message::Delivery;
use idemkey_inbox::{BoxError, Outbox, OutboxDb, Outgoing, Publisher, amqp, nats};
use serde_json::Value;
use sqlx::{Pool, Transaction};

/// The statements of one database: the shipments table, and its inserts in each mode.
#[derive(Clone, Copy)]
pub(crate) struct Sql {
    /// Atomic mode: a plain insert, in the record's transaction.
    pub(crate) insert: &'static str,
    /// Lease mode: an insert that does nothing when the shipment's `ref` (a derived key) is
    /// there already: the "external system" that deduplicates by key.
    pub(crate) insert_once: &'static str,
}

/// The table: no unique constraint on `order_id`, so a duplicate shows; `ref`, unique, only
/// in lease mode.
pub(crate) const SHIPMENTS: &str = "CREATE TABLE IF NOT EXISTS shipments (order_id TEXT NOT NULL, \
    shipped_at BIGINT NOT NULL, ref VARCHAR(64), UNIQUE (ref))";

/// The order's id and the `shipped` message's payload.
fn order(payload: &[u8]) -> Result<(String, Vec<u8>), BoxError> {
    let order: Value = serde_json::from_slice(payload)?;
    let id = match order.get("order_id") {
        Some(Value::String(id)) => id.clone(),
        Some(id @ Value::Number(_)) => id.to_string(),
        _ => return Err("the order has no order_id".into()),
    };
    let shipped = serde_json::to_vec(&serde_json::json!({ "order_id": order["order_id"] }))?;
    Ok((id, shipped))
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Atomic mode: the shipment in the record's transaction, `shipped` through the outbox.
pub(crate) struct Ship(pub(crate) Sql);

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
        let (id, shipped) = order(payload)?;
        sqlx::query(self.0.insert)
            .bind(id)
            .bind(now_ms())
            .execute(&mut **tx)
            .await?;
        outbox.publish("shipped", shipped);
        Ok(())
    }
}

/// Lease mode: the shipment inserted once by its derived key, `shipped` published directly
/// under a derived key as its message id.
pub(crate) struct ShipOnce<DB: sqlx::Database, P> {
    pub(crate) sql: Sql,
    pub(crate) pool: Pool<DB>,
    pub(crate) publisher: P,
}

impl<DB, P> ShipOnce<DB, P>
where
    DB: sqlx::Database,
    P: Publisher,
    for<'c> &'c Pool<DB>: sqlx::Executor<'c, Database = DB>,
    for<'q> String: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    <DB as sqlx::Database>::Arguments: sqlx::IntoArguments<DB>,
{
    async fn ship(&self, payload: &[u8], keys: &DerivedKeys) -> Result<(), BoxError> {
        let (id, shipped) = order(payload)?;
        sqlx::query(self.sql.insert_once)
            .bind(id)
            .bind(now_ms())
            .bind(keys.key("shipment"))
            .execute(&self.pool)
            .await?;
        let message = Outgoing {
            id: keys.key("shipped"),
            subject: "shipped".to_owned(),
            payload: shipped,
        };
        self.publisher.publish(&message).await
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
        delivery: &Delivery,
        tx: &mut Transaction<'static, DB>,
        outbox: &mut Outbox,
    ) -> Result<(), BoxError> {
        self.ship(&delivery.data, tx, outbox).await
    }
}

impl<DB, P> nats::LeaseHandler for ShipOnce<DB, P>
where
    DB: sqlx::Database,
    P: Publisher,
    for<'c> &'c Pool<DB>: sqlx::Executor<'c, Database = DB>,
    for<'q> String: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    <DB as sqlx::Database>::Arguments: sqlx::IntoArguments<DB>,
{
    async fn handle(
        &self,
        message: &jetstream::Message,
        keys: &DerivedKeys,
    ) -> Result<(), BoxError> {
        self.ship(&message.payload, keys).await
    }
}

impl<DB, P> amqp::LeaseHandler for ShipOnce<DB, P>
where
    DB: sqlx::Database,
    P: Publisher,
    for<'c> &'c Pool<DB>: sqlx::Executor<'c, Database = DB>,
    for<'q> String: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    <DB as sqlx::Database>::Arguments: sqlx::IntoArguments<DB>,
{
    async fn handle(&self, delivery: &Delivery, keys: &DerivedKeys) -> Result<(), BoxError> {
        self.ship(&delivery.data, keys).await
    }
}
