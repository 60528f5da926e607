//! Retries of unknown outcomes only where keys are honoured: a server that ignores keys and
//! answers after the client has stopped waiting, with no server declared and with it declared.

use std::time::Duration;

use idemkey_reqwest::{Delivery, Error, IdempotencyKey, Reason};

use crate::support::{Reply, Server, answer, client, created, fast, own_error, undeclared};

/// Answers every attempt with 201, a second after the client stopped waiting for it: the
/// create ran, the client cannot know.
async fn late_server() -> Server {
    let late = Reply::Late(Duration::from_secs(1), answer(201, &[], b"created"));
    Server::start(vec![late, created()]).await
}

const WAIT: Duration = Duration::from_millis(200);

#[tokio::test]
async fn by_default_a_post_whose_answer_did_not_come_is_sent_once_and_said_unknown() {
    let server = late_server().await;
    let error = client(undeclared())
        .post(server.url("/notes"))
        .body("{}")
        .timeout(WAIT)
        .send()
        .await
        .unwrap_err();

    assert_eq!(
        server.seen().len(),
        1,
        "sent again to a server not declared"
    );
    assert_eq!(server.keys(), [None], "a key for a server not declared");
    let Error::NotRetried { reason, key, .. } = own_error(&error) else {
        panic!("not NotRetried: {error:?}");
    };
    assert_eq!((*reason, key), (Reason::Timeout, &None));
    let message = error.to_string();
    assert!(message.contains("the outcome is unknown"), "{message}");
    assert!(message.contains("not sent again"), "{message}");
}

#[tokio::test]
async fn declared_the_same_post_is_retried_under_one_key() {
    let server = late_server().await;
    let response = client(fast())
        .post(server.url("/notes"))
        .body("{}")
        .timeout(WAIT)
        .send()
        .await
        .unwrap();

    assert_eq!(response.status(), 201);
    let keys = server.keys();
    assert_eq!(keys.len(), 2);
    assert!(keys[0].is_some() && keys[0] == keys[1], "{keys:?}");
    let delivery = response.extensions().get::<Delivery>().unwrap();
    let sent = delivery.key.as_ref().map(IdempotencyKey::header_value);
    assert_eq!(
        sent.as_ref().map(|v| v.as_bytes()),
        keys[0].as_deref().map(str::as_bytes)
    );
}

#[tokio::test]
async fn by_default_an_idempotent_request_is_still_retried() {
    let server = late_server().await;
    let response = client(undeclared())
        .put(server.url("/notes/7"))
        .body("{}")
        .timeout(WAIT)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    assert_eq!(server.keys(), [None, None]);
}

#[tokio::test]
async fn a_callers_own_key_to_a_server_not_declared_is_sent_but_not_counted_on() {
    let server = late_server().await;
    let error = client(undeclared())
        .post(server.url("/notes"))
        .header("idempotency-key", "\"mine\"")
        .timeout(WAIT)
        .send()
        .await
        .unwrap_err();
    assert_eq!(server.keys(), [Some("\"mine\"".to_owned())]);
    let key = own_error(&error).key().map(IdempotencyKey::as_str);
    assert_eq!(key, Some("mine"));
}
