//! A queue consumer that processes each message once, in atomic mode, without HTTP.
//!
//! Queues deliver at least once: a consumer that crashes after its work but before its
//! acknowledgement gets the message again. Each message is processed under its message id as
//! the idempotency key: the work and the record commit in one transaction, so a redelivery
//! replays the stored result instead of doing the work twice.
//!
//! `cargo run -p idemkey --example queue_consumer --features sqlite`

use idemkey::sql::{AtomicOptions, Outcome, handler_fn};
use idemkey::{ClaimRequest, Fingerprint, Key, Operation, SqliteStore, StoredResponse, sqlx};

/// A message as the queue delivers it.
struct Message {
    id: &'static str,
    payload: &'static str,
}

/// Processes one delivery; returns whether the work ran (false: a redelivery, replayed).
async fn consume(
    store: &SqliteStore,
    message: &Message,
) -> Result<bool, Box<dyn std::error::Error>> {
    let request = ClaimRequest::new(
        "orders-queue",
        Operation::new("ship-order", "v1"),
        Key::parse(message.id.as_bytes())?,
        Fingerprint::builder("MESSAGE", "orders").body(message.payload.as_bytes()),
    );
    let payload = message.payload;
    let mut work = handler_fn(move |tx| {
        Box::pin(async move {
            sqlx::query("INSERT INTO shipments (payload) VALUES (?1)")
                .bind(payload)
                .execute(&mut **tx)
                .await?;
            Ok::<_, sqlx::Error>(StoredResponse::new(200, "shipped"))
        })
    });
    match store
        .execute(&request, &AtomicOptions::default(), &mut work)
        .await?
    {
        Outcome::Executed(_) => Ok(true),
        Outcome::Replayed(_) => Ok(false),
        other => Err(format!("message {}: {other:?}", message.id).into()),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let store = SqliteStore::connect(&format!(
        "sqlite://{}",
        dir.path().join("queue.db").display()
    ))
    .await?;
    sqlx::query("CREATE TABLE shipments (payload TEXT NOT NULL)")
        .execute(store.pool())
        .await?;

    let deliveries = [
        Message {
            id: "m-1",
            payload: r#"{"order":1}"#,
        },
        Message {
            id: "m-2",
            payload: r#"{"order":2}"#,
        },
        Message {
            id: "m-1",
            payload: r#"{"order":1}"#,
        }, // redelivered
    ];
    for message in &deliveries {
        let ran = consume(&store, message).await?;
        println!(
            "{}: {}",
            message.id,
            if ran {
                "processed"
            } else {
                "already processed"
            }
        );
    }
    let shipped: i64 = sqlx::query_scalar("SELECT count(*) FROM shipments")
        .fetch_one(store.pool())
        .await?;
    assert_eq!(shipped, 2, "each message shipped once");
    Ok(())
}

#[cfg(test)]
mod tests {
    /// `cargo test` runs the example as it is.
    #[test]
    fn the_example_holds() {
        super::main().expect("the example runs and its checks hold");
    }
}
