//! Which requests get a key, which key, and what the caller learns of it.

use http::Method;
use idemkey_reqwest::{Delivery, Error, IdempotencyKey, Policy, Reason};

use crate::support::{
    BeforeEachAttempt, Reply, Server, answer, client, client_with, created, fast, free_port,
    own_error, status, undeclared, unquoted, url,
};

fn delivery(response: &reqwest::Response) -> Delivery {
    response.extensions().get::<Delivery>().cloned().unwrap()
}

#[tokio::test]
async fn a_post_gets_a_fresh_quoted_key_kept_on_every_attempt() {
    let replayed = answer(201, &[("idempotent-replayed", "true")], b"stored");
    let server = Server::start(vec![status(503), status(503), Reply::Answer(replayed)]).await;

    let response = client(fast())
        .post(server.url("/notes"))
        .body("{}")
        .send()
        .await
        .unwrap();

    let keys = server.keys();
    assert_eq!(keys.len(), 3);
    let sent = keys[0].clone().unwrap();
    assert!(
        keys.iter().all(|key| key.as_deref() == Some(&sent)),
        "{keys:?}"
    );
    let key = unquoted(&sent);
    uuid::Uuid::parse_str(key).unwrap();
    let delivery = delivery(&response);
    assert_eq!(delivery.key.as_ref().map(IdempotencyKey::as_str), Some(key));
    assert_eq!((delivery.attempts, delivery.replayed), (3, true));
    assert_eq!(response.text().await.unwrap(), "stored");
}

#[tokio::test]
async fn each_logical_request_gets_its_own_key() {
    let server = Server::start(vec![created()]).await;
    let client = client(fast());
    for _ in 0..2 {
        client.post(server.url("/notes")).send().await.unwrap();
    }
    let keys = server.keys();
    assert_ne!(keys[0], keys[1]);
}

#[tokio::test]
async fn a_first_answer_is_delivered_as_one_attempt_and_not_a_replay() {
    let server = Server::start(vec![created()]).await;
    let response = client(fast())
        .patch(server.url("/notes/1"))
        .send()
        .await
        .unwrap();
    let delivery = delivery(&response);
    assert_eq!((delivery.attempts, delivery.replayed), (1, false));
    assert_eq!(
        server.keys()[0].as_deref().map(unquoted),
        delivery.key.as_ref().map(IdempotencyKey::as_str)
    );
}

#[tokio::test]
async fn a_requests_own_key_is_kept_in_either_form() {
    for own in [r#""order-42""#, "order-42"] {
        let server = Server::start(vec![status(503), created()]).await;
        let response = client(fast())
            .post(server.url("/orders"))
            .header("idempotency-key", own)
            .send()
            .await
            .unwrap();
        assert_eq!(server.keys(), [Some(own.to_owned()), Some(own.to_owned())]);
        assert_eq!(
            delivery(&response).key.as_ref().map(IdempotencyKey::as_str),
            Some("order-42")
        );
    }
}

#[tokio::test]
async fn a_callers_key_extension_is_the_key_sent() {
    let server = Server::start(vec![status(503), created()]).await;
    let response = client(fast())
        .post(server.url("/orders"))
        .with_extension(IdempotencyKey::new("resume-7").unwrap())
        .send()
        .await
        .unwrap();
    let quoted = Some(r#""resume-7""#.to_owned());
    assert_eq!(server.keys(), [quoted.clone(), quoted]);
    assert_eq!(
        delivery(&response).key.as_ref().map(IdempotencyKey::as_str),
        Some("resume-7")
    );
}

#[tokio::test]
async fn get_and_put_get_no_key() {
    for method in [Method::GET, Method::PUT] {
        let server = Server::start(vec![status(503), status(200)]).await;
        let response = client(fast())
            .request(method.clone(), server.url("/notes/1"))
            .send()
            .await
            .unwrap();
        assert_eq!(server.keys(), [None, None], "{method}");
        assert!(
            server
                .seen()
                .iter()
                .all(|seen| seen.method == method.as_str())
        );
        assert_eq!(delivery(&response).key, None, "{method}");
    }
}

fn unkeyed() -> Policy {
    fast().methods([])
}

#[tokio::test]
async fn a_post_outside_the_keyed_methods_gets_no_key_and_no_retry_after_a_503() {
    let server = Server::start(vec![status(503), created()]).await;
    let response = client(unkeyed())
        .post(server.url("/notes"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(server.keys(), [None]);
    assert_eq!(delivery(&response).attempts, 1);
}

#[tokio::test]
async fn an_unkeyed_post_is_not_sent_again_after_its_connection_dropped() {
    let server = Server::start(vec![Reply::Drop, created()]).await;
    let error = client(unkeyed())
        .post(server.url("/notes"))
        .send()
        .await
        .unwrap_err();
    assert!(
        matches!(
            own_error(&error),
            Error::NotRetried {
                key: None,
                reason: Reason::NoAnswer,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("outcome is unknown"), "{error}");
    assert_eq!(server.keys(), [None]);
}

#[tokio::test]
async fn an_unkeyed_post_is_sent_again_when_its_connection_was_refused() {
    let port = free_port();
    let server = std::sync::Mutex::new(None);
    let server = std::sync::Arc::new(server);
    let listening = std::sync::Arc::clone(&server);
    let before = BeforeEachAttempt::new(move |attempt| {
        if attempt == 2 {
            *listening.lock().unwrap() = Some(Server::start_on(port, vec![created()]));
        }
    });
    let client = client_with(reqwest::Client::builder(), unkeyed(), Some(before));

    let response = client.post(url(port, "/notes")).send().await.unwrap();

    assert_eq!(response.status(), 201);
    assert_eq!(delivery(&response).attempts, 2);
    let server = server.lock().unwrap().take().unwrap();
    assert_eq!(server.keys(), [None]);
}

#[tokio::test]
async fn only_requests_under_a_declared_base_are_keyed_and_retried() {
    let server = Server::start(vec![status(503), status(503), created()]).await;
    let client = client(undeclared().with_base(server.url("/api/").parse().unwrap()));

    let outside = client
        .post(server.url("/apiary/notes"))
        .send()
        .await
        .unwrap();
    assert_eq!(outside.status(), 503);
    assert_eq!(delivery(&outside).key, None);
    assert_eq!(delivery(&outside).attempts, 1);
    assert_eq!(server.keys(), [None]);

    let inside = client.post(server.url("/api/notes")).send().await.unwrap();
    assert_eq!(inside.status(), 201);
    assert_eq!(delivery(&inside).attempts, 2);
    let keys = server.keys();
    assert!(keys[1].is_some() && keys[1] == keys[2], "{keys:?}");
    let paths: Vec<String> = server.seen().into_iter().map(|seen| seen.path).collect();
    assert_eq!(paths, ["/apiary/notes", "/api/notes", "/api/notes"]);
}
