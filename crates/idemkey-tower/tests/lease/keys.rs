//! Key syntax, key requirement and the actor (behaviour §2, §3).

use http::HeaderValue;
use idemkey_tower::Config;

use crate::common::{App, send};

#[tokio::test]
async fn a_required_key_must_be_there() {
    let app = App::start(Config::default()).await;
    send(app.post("/notes", None))
        .await
        .assert_problem(400, "key-missing");
    assert_eq!(app.ctx.runs(), 0);
}

#[tokio::test]
async fn an_optional_key_may_be_absent_and_then_nothing_is_recorded() {
    let app = App::start(Config::default().require_key(false)).await;
    for n in 1..=2 {
        let reply = send(app.post("/notes", None)).await;
        assert_eq!(reply.status, 201);
        assert!(!reply.replayed());
        assert_eq!(reply.json()["n"], n);
    }
}

#[tokio::test]
async fn invalid_keys_are_rejected_and_never_run() {
    let app = App::start(Config::default()).await;
    let long = "a".repeat(256);
    let invalid: [&[u8]; 6] = [
        b"",
        long.as_bytes(),
        b"a b",
        b"a\tb",
        "k\u{e9}".as_bytes(),
        b"\"abc",
    ];
    for key in invalid {
        let value = HeaderValue::from_bytes(key).unwrap();
        let reply = send(app.post("/notes", None).header("idempotency-key", value)).await;
        reply.assert_problem(400, "key-invalid");
    }
    let two_lines = app
        .post("/notes", Some("one"))
        .header("idempotency-key", "two");
    send(two_lines).await.assert_problem(400, "key-invalid");
    assert_eq!(app.ctx.runs(), 0);
}

#[tokio::test]
async fn longest_and_punctuation_keys_work() {
    let app = App::start(Config::default()).await;
    for key in [
        "a".repeat(255),
        r##"!#$%&'()*+,-./:;<=>?@[]^_`{|}~"##.to_owned(),
    ] {
        let first = send(app.post("/notes", Some(&key))).await;
        assert_eq!(first.status, 201);
        let retry = send(app.post("/notes", Some(&key))).await;
        assert!(retry.replayed(), "key {key}");
        assert_eq!(retry.body, first.body);
    }
    assert_eq!(app.ctx.runs(), 2);
}

#[tokio::test]
async fn quoted_and_bare_forms_are_one_key() {
    let app = App::start(Config::default()).await;
    let first = send(app.post("/notes", Some("\"k\""))).await;
    let retry = send(app.post("/notes", Some("k"))).await;
    assert_eq!((first.status, retry.status), (201, 201));
    assert!(retry.replayed());
    assert_eq!(app.ctx.runs(), 1);
}

#[tokio::test]
async fn a_key_without_an_actor_is_unauthorized() {
    let app = App::start(Config::default()).await;
    let anonymous = app
        .client
        .post(app.url("/notes"))
        .header("idempotency-key", "k");
    send(anonymous).await.assert_problem(401, "unauthenticated");
    assert_eq!(app.ctx.runs(), 0);
}

#[tokio::test]
async fn the_key_is_ignored_on_other_methods() {
    let app = App::start(Config::default()).await;
    let get = app
        .client
        .get(app.url("/notes"))
        .header("idempotency-key", "\"not valid");
    let reply = send(get).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.body, "list");
}

#[tokio::test]
async fn the_same_key_of_another_actor_is_another_scope() {
    let app = App::start(Config::default()).await;
    send(app.post("/notes", Some("k"))).await;
    let other = send(app.post_as("b", "/notes", Some("k"))).await;
    assert_eq!(other.status, 201);
    assert!(!other.replayed());
    assert_eq!(app.ctx.runs(), 2);
}
