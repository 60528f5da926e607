//! Atomic mode on PostgreSQL: the note and the stored response commit in one transaction.
//!
//! The handler writes on the claim's transaction (`Tx`); the layer stores the response in the
//! same transaction and commits once. A retry replays; a crash at any point leaves either
//! both or neither.
//!
//! `cargo run -p idemkey --example atomic_postgres --features axum,postgres`
//!
//! The database is `DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/test`); the
//! example works in a schema of its own and drops it at the end.

use axum::extract::Request;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Router, middleware};
use idemkey::atomic::{AtomicIdempotencyLayer, DbError, Tx};
use idemkey::{Actor, PgStore, sqlx};

async fn create_note(
    mut tx: Tx<sqlx::Postgres>,
    body: String,
) -> Result<(StatusCode, String), DbError> {
    let id: i64 = sqlx::query_scalar("INSERT INTO notes (body) VALUES ($1) RETURNING id")
        .bind(body)
        .fetch_one(&mut *tx)
        .await?;
    Ok((StatusCode::CREATED, format!(r#"{{"id":{id}}}"#)))
}

async fn authenticate(mut request: Request) -> Request {
    request.extensions_mut().insert(Actor::new("alice"));
    request
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let admin = sqlx::PgPool::connect(&url)
        .await
        .map_err(|error| format!("no PostgreSQL at {url} ({error}); set DATABASE_URL"))?;
    // A schema of its own, so the example never touches other tables.
    let schema = format!("idemkey_example_{}", std::process::id());
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
        .execute(&admin)
        .await?;
    let options = PgStore::connect_options(&url)?.options([("search_path", schema.as_str())]);
    let store = PgStore::connect_with(options).await?;
    sqlx::query("CREATE TABLE notes (id BIGSERIAL PRIMARY KEY, body TEXT NOT NULL)")
        .execute(store.pool())
        .await?;
    let app = Router::new()
        .route(
            "/notes",
            post(create_note).layer(AtomicIdempotencyLayer::new(store.clone())),
        )
        .layer(middleware::map_request(authenticate));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });

    let client = reqwest::Client::new();
    let note = || {
        client
            .post(format!("{base}/notes"))
            .header("idempotency-key", "note-1")
            .body("hello")
    };
    let first = note().send().await?;
    let first_body = first.text().await?;
    let retry = note().send().await?;
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(retry.text().await?, first_body);
    let notes: i64 = sqlx::query_scalar("SELECT count(*) FROM notes")
        .fetch_one(store.pool())
        .await?;
    println!("created {first_body}; the retry replayed it; notes in the table: {notes}");
    assert_eq!(notes, 1);
    store.close().await;
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE")))
        .execute(&admin)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    /// `cargo test` runs the example as it is, given a server: without one it would fail, so
    /// the README's test command counts it as ignored, and CI, which has the server, runs it
    /// with `--include-ignored`.
    #[test]
    #[ignore = "needs PostgreSQL (DATABASE_URL, else 127.0.0.1:5432): run with --include-ignored"]
    fn the_example_holds() {
        super::main().expect("the example runs and its checks hold");
    }
}
