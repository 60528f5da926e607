//! Lease mode calling an external service with derived keys.
//!
//! `POST /orders` charges a (fake, in-process) payment service under
//! `DerivedKeys::key("charge")`: if the handler runs again for the same request (after a crash
//! or a lease takeover), the charge repeats under the same key and the payment service
//! deduplicates it. The example sends one order twice and checks that it was charged once and
//! the retry replayed.
//!
//! `cargo run -p idemkey --example lease_external --features axum,sqlite`

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Router, middleware};
use idemkey::{Actor, IdempotencyLayer, Keys, SqliteStore};

/// The payment service: charges each idempotency key once.
async fn charge(
    State(charged): State<Arc<Mutex<HashSet<String>>>>,
    headers: HeaderMap,
) -> StatusCode {
    let key = headers["idempotency-key"]
        .to_str()
        .unwrap_or_default()
        .to_owned();
    match charged.lock().expect("not poisoned").insert(key) {
        true => StatusCode::CREATED,
        false => StatusCode::OK, // already charged under this key
    }
}

/// The application's handler: one charge per order, under the order's derived key.
async fn create_order(
    State(payments): State<String>,
    keys: Keys,
) -> Result<(StatusCode, String), StatusCode> {
    // The claim is on disk before the key leaves: a claim lost in a power cut would be
    // claimed afresh under a new record id, so new keys, and the charge made twice.
    let keys = keys
        .get()
        .await
        .map_err(|_| StatusCode::SERVICE_UNAVAILABLE)?;
    let charged = reqwest::Client::new()
        .post(&payments)
        .header("idempotency-key", keys.key("charge"))
        .send()
        .await
        .map_err(|_| StatusCode::BAD_GATEWAY)?;
    if !charged.status().is_success() {
        return Err(StatusCode::BAD_GATEWAY);
    }
    Ok((
        StatusCode::CREATED,
        r#"{"order":"o-1","paid":true}"#.to_owned(),
    ))
}

/// Stands in for real authentication, which runs outside the idempotency layer.
async fn authenticate(mut request: Request) -> Request {
    request.extensions_mut().insert(Actor::new("shop-1"));
    request
}

async fn serve(app: Router) -> std::io::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(format!("http://{addr}"))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let charged = Arc::new(Mutex::new(HashSet::new()));
    let payments = serve(
        Router::new()
            .route("/charges", post(charge))
            .with_state(charged.clone()),
    )
    .await?;

    let dir = tempfile::tempdir()?;
    let store = SqliteStore::connect(&format!(
        "sqlite://{}",
        dir.path().join("shop.db").display()
    ))
    .await?;
    let app = Router::new()
        .route(
            "/orders",
            post(create_order).layer(IdempotencyLayer::new(store)),
        )
        .layer(middleware::map_request(authenticate))
        .with_state(format!("{payments}/charges"));
    let shop = serve(app).await?;

    let client = reqwest::Client::new();
    let order = || {
        client
            .post(format!("{shop}/orders"))
            .header("idempotency-key", "order-1")
    };
    let first = order().send().await?;
    let retry = order().send().await?;
    println!(
        "first: {}; retry: {} replayed={:?}",
        first.status(),
        retry.status(),
        retry.headers().get("idempotent-replayed")
    );
    assert_eq!(first.status(), 201);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(
        charged.lock().expect("not poisoned").len(),
        1,
        "charged once"
    );
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
