//! idemkey-tower's lease layer in a plain hyper service, without axum: [`serve`] runs it on a
//! socket, and the tests check that axum is nowhere in the dependency tree.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use idemkey_core::MemoryStore;
use idemkey_tower::{Actor, Body, Config, IdempotencyLayer};
use tokio::net::TcpListener;
use tower::{ServiceBuilder, service_fn};

/// The handler: answers 201 with the request's body, as if it had created it.
async fn create(request: Request<Body>) -> Result<Response<Body>, Infallible> {
    let body = match request.into_body().collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => Bytes::from_static(b"unreadable"),
    };
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = StatusCode::CREATED;
    Ok(response)
}

/// Stands in for authentication, outside the idempotency layer.
fn authenticate<B>(mut request: Request<B>) -> Request<B> {
    request.extensions_mut().insert(Actor::new("tenant-1"));
    request
}

/// Serves the layer over a [`MemoryStore`] on a local port, in plain hyper: its address.
pub async fn serve() -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let config = Config::default().secret(b"plain test secret".as_slice());
    let service = ServiceBuilder::new()
        .map_request(authenticate::<Incoming>)
        .layer(IdempotencyLayer::with_config(MemoryStore::new(), config))
        .service(service_fn(create));
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let service = TowerToHyperService::new(service.clone());
            tokio::spawn(async move {
                let connection = http1::Builder::new();
                let _ = connection
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(address)
}
