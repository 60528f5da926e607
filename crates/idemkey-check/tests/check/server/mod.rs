//! An in-memory notes service with switchable idempotency bugs, served on 127.0.0.1:0.

mod routes;
mod store;

use std::{net::SocketAddr, sync::Arc};

use idemkey_check::CheckConfig;
use tokio::net::TcpListener;

/// Which corners the server cuts; `Bugs::default()` is a correct implementation.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Bugs {
    /// A key is accepted when absent (the request runs unrecorded).
    pub(crate) optional_key: bool,
    /// No records at all: every retry creates again.
    pub(crate) no_storage: bool,
    /// Check-then-insert without a claim, with a window between the two.
    pub(crate) racy_claim: bool,
    /// The scope is the key alone, not (actor, key).
    pub(crate) ignore_actor: bool,
    /// A stored record is replayed whatever the new body is.
    pub(crate) no_fingerprint: bool,
    /// Validation failures are stored like successes.
    pub(crate) store_failures: bool,
    /// Replays carry neither `Location` nor `Content-Type`.
    pub(crate) replay_without_headers: bool,
    /// Replays answer 200 where the original answered 201.
    pub(crate) replay_status_200: bool,
    /// A reused key with another body gets 409 instead of 422.
    pub(crate) mismatch_409: bool,
}

/// A running test server.
pub(crate) struct TestServer {
    pub(crate) addr: SocketAddr,
}

impl TestServer {
    /// Starts a server with `bugs` on an ephemeral port.
    pub(crate) async fn start(bugs: Bugs) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let app = routes::router(Arc::new(store::Store::new(bugs)));
        tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });
        Self { addr }
    }

    /// The create endpoint.
    pub(crate) fn create_url(&self) -> String {
        format!("http://{}/v1/notes", self.addr)
    }

    /// The minimal configuration: bodies and the first actor's token.
    pub(crate) fn minimal_config(&self) -> CheckConfig {
        CheckConfig::new(
            &self.create_url(),
            r#"{"title":"buy milk"}"#,
            r#"{"title":"buy bread"}"#,
        )
        .expect("config")
        .header("Authorization: Bearer s1")
        .expect("header")
    }

    /// Everything: a second actor, the list endpoint and an invalid body.
    pub(crate) fn full_config(&self) -> CheckConfig {
        self.minimal_config()
            .actor2_header("Authorization: Bearer s2")
            .and_then(|config| config.list_url("/v1/notes"))
            .expect("config")
            .invalid_body(r#"{"title":"   "}"#)
            .concurrency(16)
    }
}
