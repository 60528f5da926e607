//! Waits and limits: `Retry-After` in both forms and its cap, the attempt and time limits,
//! and timeouts. The only timing asserted is a lower bound: a retry that came no earlier
//! than the server asked.

use std::time::Duration;

use idemkey_reqwest::{Delivery, Error, IdempotencyKey, Reason};

use crate::support::{
    Reply, Server, answer, client, client_with, created, fast, http_date_in, own_error, status,
    unquoted,
};

fn delivery(response: &reqwest::Response) -> Delivery {
    response.extensions().get::<Delivery>().cloned().unwrap()
}

/// The time between the server's first and second attempts; asserts there were two, and
/// the second was answered.
async fn gap_after(server: &Server) -> Duration {
    let response = client(fast())
        .post(server.url("/notes"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    assert_eq!(delivery(&response).attempts, 2);
    let seen = server.seen();
    assert_eq!(seen.len(), 2);
    seen[1].at - seen[0].at
}

#[tokio::test]
async fn retry_after_in_seconds_is_waited() {
    let busy = answer(503, &[("retry-after", "1")], b"");
    let server = Server::start(vec![Reply::Answer(busy), created()]).await;
    let gap = gap_after(&server).await;
    assert!(gap >= Duration::from_secs(1), "retried after {gap:?}");
}

#[tokio::test]
async fn retry_after_as_an_http_date_is_waited() {
    // Dated when the answer is written, 2 s ahead; whole seconds, so the wait asked is
    // more than 1 s.
    let server = Server::scripted(|attempt| match attempt {
        0 => {
            let date = http_date_in(Duration::from_secs(2));
            Reply::Answer(answer(429, &[("retry-after", &date)], b""))
        }
        _ => created(),
    })
    .await;
    let gap = gap_after(&server).await;
    assert!(gap >= Duration::from_secs(1), "retried after {gap:?}");
}

/// idemkey's 409 `request-in-flight`, asking for a wait of `retry_after`.
fn in_flight(retry_after: &str) -> Reply {
    let body = format!(
        r#"{{"type":"{}request-in-flight","status":409}}"#,
        crate::support::PROBLEMS
    );
    let headers = [
        ("retry-after", retry_after),
        ("content-type", "application/problem+json"),
    ];
    Reply::Answer(answer(409, &headers, body.as_bytes()))
}

#[tokio::test]
async fn retry_after_on_request_in_flight_is_waited() {
    let server = Server::start(vec![in_flight("1"), created()]).await;
    let gap = gap_after(&server).await;
    assert!(gap >= Duration::from_secs(1), "retried after {gap:?}");
}

#[tokio::test]
async fn a_retry_after_of_zero_waits_the_floor() {
    let busy = answer(503, &[("retry-after", "0")], b"");
    let server = Server::start(vec![Reply::Answer(busy), created()]).await;
    let gap = gap_after(&server).await;
    assert!(gap >= Duration::from_millis(100), "retried after {gap:?}");
}

#[tokio::test]
async fn polls_of_a_request_in_flight_do_not_use_up_the_retries() {
    let mut replies = vec![in_flight("0"); 5];
    replies.push(created());
    let server = Server::start(replies).await;
    let policy = fast()
        .max_retries(1)
        .min_retry_after(Duration::from_millis(1));
    let response = client(policy)
        .post(server.url("/notes"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    assert_eq!(delivery(&response).attempts, 6);
}

#[tokio::test]
async fn a_long_retry_after_is_capped_and_still_retried() {
    let busy = answer(503, &[("retry-after", "3600")], b"");
    let server = Server::start(vec![Reply::Answer(busy), created()]).await;
    let policy = fast().max_retry_after(Duration::from_millis(200));
    let response = client(policy)
        .post(server.url("/notes"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    assert_eq!(delivery(&response).attempts, 2);
    assert_eq!(server.seen().len(), 2);
}

#[tokio::test]
async fn a_retry_after_beyond_every_limit_hands_on_the_answer() {
    // Uncapped, a wait longer than any clock can add: the time limit decides, and nothing
    // overflows.
    let busy = answer(503, &[("retry-after", "99999999999999999999999")], b"");
    let server = Server::start(vec![Reply::Answer(busy), created()]).await;
    let policy = fast().max_retry_after(Duration::MAX);
    let response = client(policy)
        .post(server.url("/notes"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(delivery(&response).attempts, 1);
}

#[tokio::test]
async fn out_of_retries_the_last_answer_is_handed_on() {
    let server = Server::start(vec![status(503)]).await;
    let response = client(fast().max_retries(2))
        .post(server.url("/notes"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(delivery(&response).attempts, 3);
    assert_eq!(server.seen().len(), 3);
}

#[tokio::test]
async fn out_of_retries_with_no_answer_it_gives_up_with_the_key() {
    let server = Server::start(vec![Reply::Drop]).await;
    let error = client(fast().max_retries(2))
        .post(server.url("/notes"))
        .send()
        .await
        .unwrap_err();
    let keys = server.keys();
    assert_eq!(keys.len(), 3);
    let sent = keys[0].clone().unwrap();
    assert!(keys.iter().all(|key| key.as_deref() == Some(&sent)));
    match own_error(&error) {
        Error::GaveUp {
            key,
            attempts,
            reason,
            ..
        } => {
            assert_eq!(
                key.as_ref().map(IdempotencyKey::as_str),
                Some(unquoted(&sent))
            );
            assert_eq!(*attempts, 3);
            assert_eq!(*reason, Reason::NoAnswer);
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn out_of_time_with_no_answer_it_gives_up() {
    let never = Reply::Late(Duration::from_secs(60), answer(201, &[], b""));
    let server = Server::start(vec![never]).await;
    let error = client(fast().max_elapsed(Duration::from_millis(300)))
        .post(server.url("/notes"))
        .send()
        .await
        .unwrap_err();
    match own_error(&error) {
        Error::GaveUp { key, reason, .. } => {
            assert!(key.is_some());
            assert_eq!(*reason, Reason::Timeout);
        }
        other => panic!("{other:?}"),
    }
    assert!(!server.seen().is_empty());
}

#[tokio::test]
async fn no_time_limit_is_a_policy_too() {
    let server = Server::start(vec![status(503), created()]).await;
    let response = client(fast().max_elapsed(Duration::MAX))
        .post(server.url("/notes"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    assert_eq!(delivery(&response).attempts, 2);
}

#[tokio::test]
async fn a_client_wide_timeout_still_bounds_each_attempt() {
    // The client's own timeout, not the request's: the first attempt must end at it and
    // be retried, and not wait for the late answer.
    let late = Reply::Late(Duration::from_secs(5), answer(201, &[], b"late"));
    let server = Server::start(vec![late, created()]).await;
    let builder = reqwest::Client::builder().timeout(Duration::from_secs(1));
    let response = client_with(builder, fast(), None)
        .post(server.url("/notes"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    assert_eq!(delivery(&response).attempts, 2);
    assert_eq!(response.text().await.unwrap(), "created");
}

#[tokio::test]
async fn an_attempt_timeout_cuts_a_stalled_attempt_and_retries_it() {
    let late = Reply::Late(Duration::from_secs(5), answer(201, &[], b"late"));
    let server = Server::start(vec![late, created()]).await;
    let policy = fast().attempt_timeout(Duration::from_millis(200));
    let response = client(policy)
        .post(server.url("/notes"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.text().await.unwrap(), "created");
    let keys = server.keys();
    assert!(keys.len() == 2 && keys[0].is_some() && keys[0] == keys[1]);
}
