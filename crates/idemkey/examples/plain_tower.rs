//! The layer on a plain tower service, no axum router: a `service_fn` behind
//! `ServiceBuilder`, served by hyper (through `axum::serve`), with lease mode on the
//! in-memory store.
//!
//! `cargo run -p idemkey --example plain_tower --features axum`

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::body::Body;
use http::{Request, Response, StatusCode};
use idemkey::{Actor, IdempotencyLayer, MemoryStore};
use tower::ServiceBuilder;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let service = ServiceBuilder::new()
        // Authentication first: it names the actor.
        .map_request(|mut request: Request<Body>| {
            request.extensions_mut().insert(Actor::new("client-1"));
            request
        })
        .layer(IdempotencyLayer::new(MemoryStore::new()))
        .service_fn(move |_request: Request<Body>| {
            let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
            async move {
                let body = Body::from(format!(r#"{{"job":{n}}}"#));
                let mut response = Response::new(body);
                *response.status_mut() = StatusCode::ACCEPTED;
                Ok::<_, Infallible>(response)
            }
        });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, tower::make::Shared::new(service)).await });

    let client = reqwest::Client::new();
    let job = || {
        client
            .post(format!("{base}/jobs"))
            .header("idempotency-key", "job-1")
    };
    let first = job().send().await?.text().await?;
    let retry = job().send().await?;
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(retry.text().await?, first);
    println!(
        "{first}, replayed to the retry; the service ran {} time(s)",
        runs.load(Ordering::SeqCst)
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
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
