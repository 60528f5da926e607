//! A create whose first answer is lost on the way back, after the server acted: the
//! middleware retries it under the same key, and the server replays the note it created
//! instead of creating a second one.
//!
//! The server is a notes route behind idemkey's layer (lease mode, in memory); between it and
//! the client, a relay that drops the first connection as soon as the answer comes back.
//!
//! `cargo run -p idemkey-reqwest --example lost_answer`

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::{Router, middleware, routing::post};
use idemkey_core::MemoryStore;
use idemkey_reqwest::{Delivery, Policy};
use idemkey_tower::{Actor, IdempotencyLayer};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};

type Notes = Arc<Mutex<Vec<String>>>;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let notes = Notes::default();
    let server = serve(notes.clone()).await?;
    let base = format!("http://{}", lossy_relay(server).await?);

    // The notes service honours keys: declared, so its unknown outcomes are retried.
    let policy = Policy::for_base(base.parse()?).initial_backoff(Duration::from_millis(50));
    let client = idemkey_reqwest::client_builder(reqwest::Client::builder(), policy)?.build();
    let response = client
        .post(format!("{base}/notes"))
        .body("buy milk")
        .send()
        .await?;

    let delivery = response.extensions().get::<Delivery>().cloned();
    let status = response.status();
    let id = response.text().await?;
    println!("{status} {id} after {delivery:?}");
    assert_eq!(status, StatusCode::CREATED);
    let notes = notes.lock().map_err(|_| "poisoned")?.clone();
    assert_eq!(
        notes,
        ["buy milk"],
        "one note, though the request ran twice"
    );
    assert_eq!(id, "0", "the caller got the id of the one note");
    let delivery = delivery.ok_or("no Delivery")?;
    assert_eq!((delivery.attempts, delivery.replayed), (2, true));
    Ok(())
}

/// A notes service: `POST /notes` stores the body and answers the note's id.
async fn serve(notes: Notes) -> std::io::Result<SocketAddr> {
    let app = Router::new()
        .route("/notes", post(create_note))
        .layer(IdempotencyLayer::new(MemoryStore::new()))
        // Authentication, outside the layer, names the actor whose keys these are.
        .layer(middleware::map_request(authenticate))
        .with_state(notes);
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(address)
}

async fn create_note(State(notes): State<Notes>, body: String) -> (StatusCode, String) {
    let mut notes = notes
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    notes.push(body);
    (StatusCode::CREATED, (notes.len() - 1).to_string())
}

async fn authenticate(mut request: Request) -> Request {
    request.extensions_mut().insert(Actor::new("alice"));
    request
}

/// Forwards connections to `server`, except that the first one is closed as soon as the
/// server's answer starts to come back: the server has acted, the client never hears of it.
async fn lossy_relay(server: SocketAddr) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move {
        let mut lose = true;
        while let Ok((mut client, _)) = listener.accept().await {
            let Ok(mut upstream) = TcpStream::connect(server).await else {
                continue;
            };
            let lose_this = std::mem::take(&mut lose);
            tokio::spawn(async move {
                if !lose_this {
                    return tokio::io::copy_bidirectional(&mut client, &mut upstream)
                        .await
                        .map(drop);
                }
                let (mut from_server, mut to_server) = upstream.split();
                let mut answer = [0; 1];
                tokio::select! {
                    sent = tokio::io::copy(&mut client, &mut to_server) => sent.map(drop),
                    // Both connections drop here, the answer unsent.
                    read = from_server.read(&mut answer) => read.map(drop),
                }
            });
        }
    });
    Ok(address)
}

#[cfg(test)]
mod tests {
    /// `cargo test` runs the example as it is.
    #[test]
    fn the_example_holds() {
        super::main().expect("the example runs and its checks hold");
    }
}
