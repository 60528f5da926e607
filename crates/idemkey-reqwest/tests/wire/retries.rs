//! The retry table, row by row, over a real socket: what is sent again with the same key,
//! what is final, and what a body changes.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use idemkey_reqwest::{Delivery, Error, IdempotencyKey, Policy, Reason};
use reqwest::Body;

use crate::support::{
    BeforeEachAttempt, Reply, Server, answer, client, client_with, created, fast, free_port, head,
    own_error, problem, status, unquoted, url,
};

/// Sends a keyed POST to a server that answers its first attempt with `first` and its
/// second with 201; asserts it came back 201 after two attempts with one key.
async fn retried_after(first: Reply, policy: Policy) {
    retried_within(first, policy, Duration::from_secs(30)).await;
}

/// [`retried_after`], each attempt waiting `timeout` at most for its answer.
async fn retried_within(first: Reply, policy: Policy, timeout: Duration) {
    let server = Server::start(vec![first, created()]).await;
    let response = client(policy)
        .post(server.url("/notes"))
        .body(r#"{"title":"a"}"#)
        .timeout(timeout)
        .send()
        .await
        .unwrap();
    assert_sent_twice_with_one_key(&server, response).await;
}

async fn assert_sent_twice_with_one_key(server: &Server, response: reqwest::Response) {
    assert_eq!(response.status(), 201);
    let delivery = response.extensions().get::<Delivery>().cloned().unwrap();
    assert_eq!(response.text().await.unwrap(), "created");
    let seen = server.seen();
    assert_eq!(seen.len(), 2);
    assert!(seen.iter().all(|s| s.body == br#"{"title":"a"}"#));
    let sent = seen[0].key.clone().unwrap();
    assert_eq!(seen[1].key.as_deref(), Some(sent.as_str()));
    assert_eq!(
        delivery.key.as_ref().map(IdempotencyKey::as_str),
        Some(unquoted(&sent))
    );
    assert_eq!(delivery.attempts, 2);
}

#[tokio::test]
async fn a_connection_dropped_before_any_answer_is_retried() {
    retried_after(Reply::Drop, fast()).await;
}

#[tokio::test]
async fn a_refused_connection_is_retried() {
    let port = free_port();
    let server = Arc::new(Mutex::new(None));
    let listening = Arc::clone(&server);
    let before = BeforeEachAttempt::new(move |attempt| {
        if attempt == 2 {
            *listening.lock().unwrap() = Some(Server::start_on(port, vec![created()]));
        }
    });
    let client = client_with(reqwest::Client::builder(), fast(), Some(before));

    let response = client
        .post(url(port, "/notes"))
        .body(r#"{"title":"a"}"#)
        .send()
        .await
        .unwrap();

    assert_eq!(response.status(), 201);
    let delivery = response.extensions().get::<Delivery>().cloned().unwrap();
    assert_eq!(delivery.attempts, 2);
    let server = server.lock().unwrap().take().unwrap();
    let keys = server.keys();
    assert_eq!(keys.len(), 1);
    assert_eq!(
        keys[0].as_deref().map(unquoted),
        delivery.key.as_ref().map(IdempotencyKey::as_str)
    );
}

#[tokio::test]
async fn an_answer_cut_off_is_retried() {
    let mut cut = head(201, &[], 100);
    cut.extend_from_slice(br#"{"id":"#);
    retried_after(Reply::CutOff(cut), fast()).await;
}

#[tokio::test]
async fn a_timeout_is_retried() {
    let late = answer(201, &[], b"too late");
    let timeout = Duration::from_secs(1);
    retried_within(Reply::Late(Duration::from_secs(30), late), fast(), timeout).await;
}

#[tokio::test]
async fn request_in_flight_is_retried() {
    retried_after(problem(409, "request-in-flight"), fast()).await;
}

#[tokio::test]
async fn too_many_requests_is_retried() {
    retried_after(status(429), fast()).await;
}

#[tokio::test]
async fn bad_gateway_is_retried() {
    retried_after(status(502), fast()).await;
}

#[tokio::test]
async fn unavailable_is_retried() {
    retried_after(status(503), fast()).await;
}

#[tokio::test]
async fn gateway_timeout_is_retried() {
    retried_after(status(504), fast()).await;
}

#[tokio::test]
async fn outcome_unknown_is_retried_even_when_other_server_errors_are_not() {
    retried_after(problem(500, "outcome-unknown"), fast()).await;
    let policy = fast().retry_server_errors(false);
    retried_after(problem(500, "outcome-unknown"), policy).await;
}

#[tokio::test]
async fn another_server_error_is_retried_by_default() {
    retried_after(status(500), fast()).await;
    retried_after(problem(500, "handler-failed"), fast()).await;
}

/// Sends a keyed POST to a server that answers its first attempt with `first` and anything
/// after with 201; asserts `first` was final: one attempt, its status handed on.
async fn final_after(first: Reply, expected: u16, policy: Policy) -> Delivery {
    let server = Server::start(vec![first, created()]).await;
    let response = client(policy)
        .post(server.url("/notes"))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), expected);
    assert_eq!(server.seen().len(), 1);
    let delivery = response.extensions().get::<Delivery>().cloned().unwrap();
    assert_eq!(delivery.attempts, 1);
    delivery
}

#[tokio::test]
async fn another_server_error_is_final_when_configured_so() {
    let policy = fast().retry_server_errors(false);
    final_after(status(500), 500, policy.clone()).await;
    final_after(status(501), 501, policy).await;
}

#[tokio::test]
async fn key_reused_is_never_retried() {
    final_after(problem(422, "key-reused"), 422, fast()).await;
}

#[tokio::test]
async fn key_missing_is_never_retried() {
    final_after(problem(400, "key-missing"), 400, fast()).await;
}

#[tokio::test]
async fn not_found_is_never_retried() {
    final_after(status(404), 404, fast()).await;
}

#[tokio::test]
async fn a_plain_409_to_a_keyed_request_is_retried_after_backoff() {
    // The draft gives a keyed request's 409 one meaning: the key is still being processed.
    retried_after(status(409), fast()).await;
    retried_after(problem(409, "email-taken"), fast()).await;
}

#[tokio::test]
async fn a_409_that_says_the_key_was_reused_is_never_retried() {
    final_after(problem(409, "key-reused"), 409, fast()).await;
}

#[tokio::test]
async fn a_409_to_a_request_without_a_key_is_final() {
    let server = Server::start(vec![problem(409, "email-taken"), created()]).await;
    let response = client(fast())
        .put(server.url("/users/7"))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 409);
    assert_eq!(server.keys(), [None]);
}

#[tokio::test]
async fn previous_attempt_unknown_is_never_retried() {
    final_after(problem(500, "previous-attempt-unknown"), 500, fast()).await;
}

#[tokio::test]
async fn a_replayed_unavailable_is_final_and_said_to_be_a_replay() {
    let replay = answer(503, &[("idempotent-replayed", "true")], b"stored");
    let delivery = final_after(Reply::Answer(replay), 503, fast()).await;
    assert!(delivery.replayed);
}

/// A body the client cannot clone: a stream of two chunks.
fn stream_body() -> Body {
    let chunks: Vec<Result<Bytes, std::io::Error>> = vec![
        Ok(Bytes::from_static(b"{\"title\":")),
        Ok(Bytes::from_static(b"\"a\"}")),
    ];
    Body::wrap_stream(futures_util::stream::iter(chunks))
}

#[tokio::test]
async fn a_stream_body_that_needs_a_retry_is_an_error_after_one_attempt() {
    let server = Server::start(vec![status(503), created()]).await;
    let error = client(fast())
        .post(server.url("/notes"))
        .body(stream_body())
        .send()
        .await
        .unwrap_err();

    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].body, br#"{"title":"a"}"#);
    let sent = seen[0].key.clone().unwrap();
    match own_error(&error) {
        Error::StreamNotRetryable {
            key,
            reason,
            status,
            ..
        } => {
            assert_eq!(
                key.as_ref().map(IdempotencyKey::as_str),
                Some(unquoted(&sent))
            );
            assert_eq!(*reason, Reason::Unavailable);
            assert_eq!(status.map(|s| s.as_u16()), Some(503));
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_stream_body_whose_connection_dropped_is_an_error_after_one_attempt() {
    let server = Server::start(vec![Reply::Drop, created()]).await;
    let error = client(fast())
        .post(server.url("/notes"))
        .body(stream_body())
        .send()
        .await
        .unwrap_err();
    assert_eq!(server.seen().len(), 1);
    match own_error(&error) {
        Error::StreamNotRetryable { status, source, .. } => {
            assert_eq!(*status, None);
            assert!(source.is_some());
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_stream_body_past_the_retry_limit_gets_its_answer() {
    let server = Server::start(vec![status(503), created()]).await;
    let response = client(fast().max_retries(0))
        .post(server.url("/notes"))
        .body(stream_body())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(server.seen().len(), 1);
}

#[tokio::test]
async fn a_stream_body_answered_at_once_is_fine() {
    let server = Server::start(vec![created()]).await;
    let response = client(fast())
        .post(server.url("/notes"))
        .body(stream_body())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    assert_eq!(server.seen()[0].body, br#"{"title":"a"}"#);
    assert_eq!(response.text().await.unwrap(), "created");
}

/// 256 KiB that are not one byte repeated, so that a lost or doubled piece shows.
fn big_body() -> Vec<u8> {
    (0..256 * 1024u32).map(|i| (i % 251) as u8).collect()
}

#[tokio::test]
async fn a_body_longer_than_the_buffer_reaches_the_caller_whole() {
    let body = big_body();
    let server = Server::start(vec![Reply::Answer(answer(200, &[], &body))]).await;
    let response = client(fast().buffer_limit(1024))
        .post(server.url("/export"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.extensions().get::<Delivery>().is_some());
    let received = response.bytes().await.unwrap();
    assert_eq!(received.len(), body.len());
    assert!(received == body, "the body differs");
}

#[tokio::test]
async fn a_body_within_the_buffer_reaches_the_caller_whole() {
    let body = big_body();
    let server = Server::start(vec![Reply::Answer(answer(200, &[], &body))]).await;
    let response = client(fast())
        .post(server.url("/export"))
        .send()
        .await
        .unwrap();
    let received = response.bytes().await.unwrap();
    assert!(received == body, "the body differs");
}

#[tokio::test]
async fn a_body_cut_after_the_buffer_is_a_body_error_for_the_caller() {
    let body = big_body();
    let mut cut = head(200, &[], body.len());
    cut.extend_from_slice(&body[..64 * 1024]);
    let server = Server::start(vec![Reply::CutOff(cut), created()]).await;
    let response = client(fast().buffer_limit(1024))
        .post(server.url("/export"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.bytes().await.is_err());
    assert_eq!(server.seen().len(), 1);
}
