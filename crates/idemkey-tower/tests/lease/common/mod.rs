//! A real axum server on 127.0.0.1:0 behind the layer, with handlers the tests control.

mod handlers;
mod store;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::middleware;
use bytes::Bytes;
use http::HeaderMap;
use idemkey_core::MemoryStore;
use idemkey_tower::{Config, IdempotencyLayer};
use tokio::sync::Semaphore;

#[allow(unused_imports)]
pub(crate) use store::{Fail, TestStore};

/// What the handlers share with the test.
#[derive(Default)]
pub(crate) struct Ctx {
    /// How many times any handler ran.
    pub(crate) runs: AtomicUsize,
    /// A permit per gated handler that started.
    pub(crate) entered: Signal,
    /// Permits the test hands out to let gated handlers finish.
    pub(crate) release: Signal,
    /// A permit per request future dropped before it finished (client gone).
    pub(crate) dropped: Signal,
    /// The derived key `charge` seen by each execution, in order.
    pub(crate) derived: std::sync::Mutex<Vec<String>>,
}

impl Ctx {
    pub(crate) fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }
}

/// A running server and a client for it.
pub(crate) struct App {
    base: String,
    pub(crate) client: reqwest::Client,
    pub(crate) ctx: Arc<Ctx>,
    pub(crate) store: TestStore,
    /// The server's layer (a clone, sharing its state): what it is executing and waiting for.
    pub(crate) layer: IdempotencyLayer<TestStore>,
}

/// A response, read whole.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

impl Reply {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub(crate) fn replayed(&self) -> bool {
        self.header("idempotent-replayed") == Some("true")
    }

    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }

    /// Asserts an idemkey problem response with this status and slug.
    pub(crate) fn assert_problem(&self, status: u16, slug: &str) {
        assert_eq!(self.status, status, "body: {:?}", self.body);
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json")
        );
        assert_eq!(self.header("cache-control"), Some("no-store"));
        let body = self.json();
        let type_uri = body["type"].as_str().expect("a type");
        assert!(type_uri.ends_with(&format!("#{slug}")), "{type_uri}");
        assert_eq!(body["status"], status);
        assert!(body["title"].is_string());
    }
}

/// A counted event: raised by one side, taken once per raise by the other.
pub(crate) struct Signal(Semaphore);

impl Default for Signal {
    fn default() -> Self {
        Self(Semaphore::new(0))
    }
}

impl Signal {
    pub(crate) fn raise(&self, times: usize) {
        self.0.add_permits(times);
    }

    pub(crate) async fn take(&self) {
        self.0.acquire().await.expect("never closed").forget();
    }

    /// The raises not taken yet.
    #[allow(dead_code)]
    pub(crate) fn count(&self) -> usize {
        self.0.available_permits()
    }
}

/// Takes one raise of `signal`; fails the test instead of hanging if it never comes.
pub(crate) async fn wait_for(what: &str, signal: &Signal) {
    tokio::time::timeout(Duration::from_secs(20), signal.take())
        .await
        .unwrap_or_else(|_| panic!("gave up waiting for {what}"));
}

/// Polls `done` until it holds; fails the test instead of hanging if it never does.
pub(crate) async fn wait_until(what: &str, done: impl Fn() -> bool) {
    let polled = async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(20), polled)
        .await
        .unwrap_or_else(|_| panic!("gave up waiting for {what}"));
}

impl App {
    pub(crate) async fn start(config: Config) -> Self {
        Self::start_with(config, MemoryStore::new(), |router| router).await
    }

    /// Starts a server: routes, the idempotency layer, `extra` (outside it), a probe that
    /// notices dropped request futures, and authentication from `x-actor` outermost.
    pub(crate) async fn start_with(
        config: Config,
        memory: MemoryStore,
        extra: impl FnOnce(Router) -> Router,
    ) -> Self {
        Self::start_in(Arc::new(Ctx::default()), config, memory, extra).await
    }

    /// Another instance over the same `memory` (a clone of this app's store) and handlers'
    /// context: what another process of the service is. Its layer knows nothing of what this
    /// one is executing.
    pub(crate) async fn sibling(&self, config: Config, memory: MemoryStore) -> Self {
        Self::start_in(self.ctx.clone(), config, memory, |router| router).await
    }

    async fn start_in(
        ctx: Arc<Ctx>,
        config: Config,
        memory: MemoryStore,
        extra: impl FnOnce(Router) -> Router,
    ) -> Self {
        let store = TestStore::new(memory);
        let layer = IdempotencyLayer::with_config(store.clone(), config.secret(b"s3".as_slice()));
        let router = handlers::routes(ctx.clone()).layer(layer.clone());
        let router = extra(router)
            .layer(middleware::from_fn_with_state(ctx.clone(), handlers::probe))
            .layer(middleware::map_request(handlers::authenticate));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a free port");
        let base = format!("http://{}", listener.local_addr().expect("bound"));
        tokio::spawn(async move { axum::serve(listener, router).await });
        Self {
            base,
            client: reqwest::Client::new(),
            ctx,
            store,
            layer,
        }
    }

    /// A POST from actor `a`, with this key if any.
    pub(crate) fn post(&self, path: &str, key: Option<&str>) -> reqwest::RequestBuilder {
        self.post_as("a", path, key)
    }

    /// A POST from `actor`, with this key if any.
    pub(crate) fn post_as(
        &self,
        actor: &str,
        path: &str,
        key: Option<&str>,
    ) -> reqwest::RequestBuilder {
        let request = self
            .client
            .post(format!("{}{path}", self.base))
            .header("x-actor", actor);
        match key {
            Some(key) => request.header("idempotency-key", key),
            None => request,
        }
    }

    /// A JSON POST from actor `a` with key `key`.
    pub(crate) fn json(&self, path: &str, key: &str, body: &str) -> reqwest::RequestBuilder {
        self.post(path, Some(key))
            .header("content-type", "application/json")
            .body(body.to_owned())
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

pub(crate) async fn send(request: reqwest::RequestBuilder) -> Reply {
    let response = request.send().await.expect("the server answers");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.bytes().await.expect("a whole body");
    Reply {
        status,
        headers,
        body,
    }
}
