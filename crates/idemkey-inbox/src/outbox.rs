//! The outbox: messages a handler publishes, written in its transaction and published after
//! the commit, each under an id derived from the inbound message's record.
//!
//! The id is the same however often the message is executed (a re-run after a serialization
//! failure, a takeover) or its row published (a relay after a crash), so the broker's own
//! deduplication (JetStream's duplicate window on `Nats-Msg-Id`) and idempotent consumers
//! downstream see one message.

use std::future::Future;

use idemkey_core::{Key, Operation};
use sha2::{Digest, Sha256};
use sqlx::{Pool, Transaction};

/// The outbox's table, in the records' database.
pub const TABLE: &str = "idemkey_outbox";

/// A message for the broker, as the outbox keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outgoing {
    /// Its message id: derived from the inbound message's scope and its place among the
    /// handler's messages.
    pub id: String,
    /// The subject to publish it to.
    pub subject: String,
    /// The payload.
    pub payload: Vec<u8>,
}

/// What a handler publishes, in order: given to it with its transaction.
#[derive(Debug)]
pub struct Outbox {
    base: String,
    messages: Vec<Outgoing>,
}

impl Outbox {
    /// The outbox of the message of `key`, for `consumer` running `operation`.
    pub(crate) fn new(consumer: &str, operation: &Operation, key: &Key) -> Self {
        let mut hash = Sha256::new();
        for field in [consumer, operation.name(), key.as_str()] {
            hash.update((field.len() as u64).to_be_bytes());
            hash.update(field.as_bytes());
        }
        let digest = hash.finalize();
        Self {
            base: hex::encode(&digest[..16]),
            messages: Vec::new(),
        }
    }

    /// Publishes `payload` to `subject` once the handler's transaction commits, and returns
    /// the message's id: the same on every execution of the inbound message.
    pub fn publish(&mut self, subject: impl Into<String>, payload: impl Into<Vec<u8>>) -> &str {
        let id = format!("{}-{}", self.base, self.messages.len());
        self.messages.push(Outgoing {
            id,
            subject: subject.into(),
            payload: payload.into(),
        });
        &self.messages[self.messages.len() - 1].id
    }

    /// The messages published so far.
    pub fn messages(&self) -> &[Outgoing] {
        &self.messages
    }

    pub(crate) fn into_messages(self) -> Vec<Outgoing> {
        self.messages
    }
}

/// A database the outbox can live in: SQLite, PostgreSQL or MySQL (and MariaDB).
pub trait OutboxDb: idemkey_sqlx::Backend {
    /// Creates the outbox's table if it is missing.
    fn create_outbox(pool: &Pool<Self>) -> impl Future<Output = sqlx::Result<()>> + Send;

    /// Writes `messages` in `tx`, made at `now_ms` (milliseconds since the Unix epoch).
    fn insert_outgoing<'t>(
        tx: &'t mut Transaction<'static, Self>,
        messages: &'t [Outgoing],
        now_ms: i64,
    ) -> impl Future<Output = sqlx::Result<()>> + Send + 't;

    /// Up to `limit` messages made at or before `before_ms`, oldest first.
    fn pending_outgoing(
        pool: &Pool<Self>,
        before_ms: i64,
        limit: i64,
    ) -> impl Future<Output = sqlx::Result<Vec<Outgoing>>> + Send;

    /// Removes the published messages `ids` in one statement, on `conn` (on SQLite, the
    /// writer's).
    fn remove_outgoing<'a>(
        conn: &'a mut <Self as sqlx::Database>::Connection,
        ids: &'a [String],
    ) -> impl Future<Output = sqlx::Result<()>> + Send + 'a;
}

/// `DELETE FROM idemkey_outbox WHERE id IN (...)` with `count` placeholders, each written
/// by `placeholder` from its 1-based position.
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
fn remove_statement(count: usize, placeholder: fn(usize) -> String) -> String {
    let list: Vec<String> = (1..=count).map(placeholder).collect();
    format!("DELETE FROM {TABLE} WHERE id IN ({})", list.join(", "))
}

/// The statements of a backend, its placeholders written in, and how it writes the `n`th
/// placeholder of a statement made at run time.
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
struct Statements {
    create: &'static [&'static str],
    insert: &'static str,
    pending: &'static str,
    placeholder: fn(usize) -> String,
}

macro_rules! outbox_db {
    ($feature:literal, $db:ty, $statements:expr) => {
        #[cfg(feature = $feature)]
        impl OutboxDb for $db {
            async fn create_outbox(pool: &Pool<Self>) -> sqlx::Result<()> {
                for statement in $statements.create {
                    sqlx::query(*statement).execute(pool).await?;
                }
                Ok(())
            }

            fn insert_outgoing<'t>(
                tx: &'t mut Transaction<'static, Self>,
                messages: &'t [Outgoing],
                now_ms: i64,
            ) -> impl Future<Output = sqlx::Result<()>> + Send + 't {
                async move {
                    for message in messages {
                        sqlx::query($statements.insert)
                            .bind(&message.id)
                            .bind(&message.subject)
                            .bind(&message.payload)
                            .bind(now_ms)
                            .execute(&mut **tx)
                            .await?;
                    }
                    Ok(())
                }
            }

            async fn pending_outgoing(
                pool: &Pool<Self>,
                before_ms: i64,
                limit: i64,
            ) -> sqlx::Result<Vec<Outgoing>> {
                let rows: Vec<(String, String, Vec<u8>)> = sqlx::query_as($statements.pending)
                    .bind(before_ms)
                    .bind(limit)
                    .fetch_all(pool)
                    .await?;
                Ok(rows
                    .into_iter()
                    .map(|(id, subject, payload)| Outgoing {
                        id,
                        subject,
                        payload,
                    })
                    .collect())
            }

            fn remove_outgoing<'a>(
                conn: &'a mut <Self as sqlx::Database>::Connection,
                ids: &'a [String],
            ) -> impl Future<Output = sqlx::Result<()>> + Send + 'a {
                async move {
                    if ids.is_empty() {
                        return Ok(());
                    }
                    // Only placeholders are written into it: the ids are bound.
                    let statement = remove_statement(ids.len(), $statements.placeholder);
                    let mut query = sqlx::query(sqlx::AssertSqlSafe(statement));
                    for id in ids {
                        query = query.bind(id);
                    }
                    query.execute(conn).await?;
                    Ok(())
                }
            }
        }
    };
}

outbox_db!(
    "sqlite",
    sqlx::Sqlite,
    Statements {
        create: &[
            "CREATE TABLE IF NOT EXISTS idemkey_outbox (id TEXT PRIMARY KEY, subject TEXT NOT NULL, \
             payload BLOB NOT NULL, created_ms INTEGER NOT NULL)",
            "CREATE INDEX IF NOT EXISTS idemkey_outbox_created ON idemkey_outbox (created_ms)",
        ],
        insert: "INSERT INTO idemkey_outbox (id, subject, payload, created_ms) VALUES (?1, ?2, ?3, ?4)",
        pending: "SELECT id, subject, payload FROM idemkey_outbox WHERE created_ms <= ?1 \
                  ORDER BY created_ms, id LIMIT ?2",
        placeholder: |n| format!("?{n}"),
    }
);

outbox_db!(
    "postgres",
    sqlx::Postgres,
    Statements {
        create: &[
            "CREATE TABLE IF NOT EXISTS idemkey_outbox (id TEXT PRIMARY KEY, subject TEXT NOT NULL, \
             payload BYTEA NOT NULL, created_ms BIGINT NOT NULL)",
            "CREATE INDEX IF NOT EXISTS idemkey_outbox_created ON idemkey_outbox (created_ms)",
        ],
        insert: "INSERT INTO idemkey_outbox (id, subject, payload, created_ms) VALUES ($1, $2, $3, $4)",
        pending: "SELECT id, subject, payload FROM idemkey_outbox WHERE created_ms <= $1 \
                  ORDER BY created_ms, id LIMIT $2",
        placeholder: |n| format!("${n}"),
    }
);

outbox_db!(
    "mysql",
    sqlx::MySql,
    Statements {
        create: &[
            "CREATE TABLE IF NOT EXISTS idemkey_outbox (id VARCHAR(64) PRIMARY KEY, \
             subject VARCHAR(255) NOT NULL, payload LONGBLOB NOT NULL, created_ms BIGINT NOT NULL, \
             INDEX idemkey_outbox_created (created_ms))",
        ],
        insert: "INSERT INTO idemkey_outbox (id, subject, payload, created_ms) VALUES (?, ?, ?, ?)",
        pending: "SELECT id, subject, payload FROM idemkey_outbox WHERE created_ms <= ? \
                  ORDER BY created_ms, id LIMIT ?",
        placeholder: |_| "?".to_owned(),
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    fn outbox(consumer: &str, key: &str) -> Outbox {
        let key = Key::parse(key.as_bytes()).unwrap();
        Outbox::new(consumer, &Operation::new("ship", "v1"), &key)
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn removals_name_every_id() {
        assert_eq!(
            remove_statement(3, |n| format!("${n}")),
            "DELETE FROM idemkey_outbox WHERE id IN ($1, $2, $3)"
        );
    }

    #[test]
    fn ids_depend_on_the_inbound_message_and_the_place_only() {
        let mut a = outbox("shipper", "m-1");
        let first = a.publish("shipped", "x").to_owned();
        let second = a.publish("shipped", "y").to_owned();
        assert_ne!(first, second);
        let mut again = outbox("shipper", "m-1");
        assert_eq!(again.publish("elsewhere", "z"), first);
        assert_ne!(outbox("shipper", "m-2").publish("shipped", "x"), first);
        assert_ne!(outbox("other", "m-1").publish("shipped", "x"), first);
    }
}
