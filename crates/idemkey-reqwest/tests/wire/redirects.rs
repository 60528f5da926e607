//! Redirects, followed hop by hop: the declared-server check on every hop, the key dropped on
//! a hop to another origin, and a retry sent to the hop that failed.

use idemkey_reqwest::{Delivery, Policy};

use crate::support::{Reply, Server, answer, client, created, status, undeclared};

fn redirect(status: u16, location: &str) -> Reply {
    Reply::Answer(answer(status, &[("location", location)], b""))
}

fn delivery(response: &reqwest::Response) -> Delivery {
    response.extensions().get::<Delivery>().cloned().unwrap()
}

/// The policy that declares `server`'s `path` and below, with a short backoff.
fn declaring(server: &Server, path: &str) -> Policy {
    undeclared().with_base(server.url(path).parse().unwrap())
}

#[tokio::test]
async fn a_redirect_to_another_origin_takes_no_key_there_and_nothing_is_resent_there() {
    let other = Server::start(vec![status(503)]).await;
    let origin = Server::start(vec![redirect(307, &other.url("/notes"))]).await;

    let response = client(declaring(&origin, "/"))
        .post(origin.url("/notes"))
        .header("authorization", "Bearer secret")
        .body("{}")
        .send()
        .await
        .unwrap();

    assert_eq!(response.status(), 503, "the other origin's answer is final");
    let (at_origin, at_other) = (origin.seen(), other.seen());
    assert_eq!(at_origin.len(), 1);
    assert!(at_origin[0].key.is_some());
    assert_eq!(at_other.len(), 1, "sent again to the other origin");
    assert_eq!(at_other[0].key, None, "the key left for the other origin");
    assert_eq!(
        (at_other[0].method.as_str(), &at_other[0].body[..]),
        ("POST", &b"{}"[..])
    );
    let delivery = delivery(&response);
    assert_eq!((delivery.attempts, delivery.redirects), (2, 1));
}

#[tokio::test]
async fn a_redirect_on_the_origin_keeps_the_key_and_a_retry_goes_to_the_hop_that_failed() {
    let server = Server::start(vec![redirect(308, "/v2/notes"), status(503), created()]).await;

    let response = client(declaring(&server, "/"))
        .post(server.url("/v1/notes"))
        .body("{}")
        .send()
        .await
        .unwrap();

    assert_eq!(response.status(), 201);
    let seen = server.seen();
    let paths: Vec<&str> = seen.iter().map(|s| s.path.as_str()).collect();
    assert_eq!(paths, ["/v1/notes", "/v2/notes", "/v2/notes"]);
    assert!(seen[0].key.is_some());
    assert!(seen.iter().all(|s| s.key == seen[0].key && s.body == b"{}"));
    let delivery = delivery(&response);
    assert_eq!((delivery.attempts, delivery.redirects), (3, 1));
}

#[tokio::test]
async fn the_declared_bases_are_checked_on_every_hop() {
    let server = Server::start(vec![redirect(307, "/elsewhere/notes"), status(503)]).await;

    let response = client(declaring(&server, "/api/"))
        .post(server.url("/api/notes"))
        .body("{}")
        .send()
        .await
        .unwrap();

    assert_eq!(response.status(), 503, "retried outside the declared base");
    let paths: Vec<String> = server.seen().into_iter().map(|s| s.path).collect();
    assert_eq!(paths, ["/api/notes", "/elsewhere/notes"]);
}

#[tokio::test]
async fn a_post_answered_303_is_fetched_with_a_get() {
    let server = Server::start(vec![
        redirect(303, "/notes/7"),
        Reply::Answer(answer(200, &[], b"note 7")),
    ])
    .await;

    let response = client(declaring(&server, "/"))
        .post(server.url("/notes"))
        .body("{}")
        .send()
        .await
        .unwrap();

    assert_eq!(response.text().await.unwrap(), "note 7");
    let seen = server.seen();
    let methods: Vec<&str> = seen.iter().map(|s| s.method.as_str()).collect();
    assert_eq!(methods, ["POST", "GET"]);
    assert!(seen[1].body.is_empty());
}

#[tokio::test]
async fn past_the_redirect_limit_the_redirect_is_the_answer() {
    let server = Server::start(vec![redirect(307, "/again")]).await;
    let response = client(declaring(&server, "/").max_redirects(2))
        .post(server.url("/notes"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 307);
    assert_eq!(server.seen().len(), 3);
    assert_eq!(delivery(&response).redirects, 2);
}
