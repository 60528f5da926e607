//! The middleware composed with reqwest-retry, outside it and inside it: every attempt of
//! either layer carries the one key, byte for byte.

use std::time::Duration;

use idemkey_reqwest::IdempotencyMiddleware;
use reqwest_middleware::ClientBuilder;
use reqwest_retry::RetryTransientMiddleware;
use reqwest_retry::policies::ExponentialBackoff;

use crate::support::{Reply, Server, created, fast, status};

fn outer_retries() -> RetryTransientMiddleware<ExponentialBackoff> {
    let backoff = ExponentialBackoff::builder()
        .retry_bounds(Duration::from_millis(1), Duration::from_millis(5))
        .build_with_max_retries(3);
    RetryTransientMiddleware::new_with_policy(backoff)
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_retry_layer_outside_resends_under_the_same_key() {
    for own in [None, Some("bare-key"), Some("\"quoted-key\"")] {
        let server = Server::start(vec![status(503), status(503), created()]).await;
        // The middleware makes one attempt; reqwest-retry, outside, makes the retries.
        let client = ClientBuilder::new(http())
            .with(outer_retries())
            .with(IdempotencyMiddleware::new(fast().max_retries(0)))
            .build();
        let mut request = client.post(server.url("/notes")).body("{}");
        if let Some(own) = own {
            request = request.header("idempotency-key", own);
        }

        assert_eq!(request.send().await.unwrap().status(), 201);
        let keys = server.keys();
        assert_eq!(keys.len(), 3);
        assert!(
            keys[0].is_some() && keys.iter().all(|k| *k == keys[0]),
            "{keys:?}"
        );
        if let Some(own) = own {
            assert_eq!(keys[0].as_deref(), Some(own), "the form changed");
        }
    }
}

#[tokio::test]
async fn a_retry_layer_inside_resends_under_the_same_key() {
    let server = Server::start(vec![Reply::Drop, created()]).await;
    let client = ClientBuilder::new(http())
        .with(IdempotencyMiddleware::new(fast().max_retries(0)))
        .with(outer_retries())
        .build();

    let response = client
        .post(server.url("/notes"))
        .body("{}")
        .send()
        .await
        .unwrap();

    assert_eq!(response.status(), 201);
    let keys = server.keys();
    assert_eq!(keys.len(), 2);
    assert!(keys[0].is_some() && keys[0] == keys[1], "{keys:?}");
}
