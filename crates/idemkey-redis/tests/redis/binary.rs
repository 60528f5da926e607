//! Binary-safe scopes: quotes, brackets, braces, newlines, `%` and the longest values travel
//! as script arguments only, round-trip, and stay apart; a hash that is not the scope's is
//! refused, never taken for it.

use idemkey_core::testkit::LONG;
use idemkey_core::{
    Begin, ClaimRequest, Error, ExpiredLease, Fingerprint, Key, MAX_KEY_LEN, Operation, Store,
    StoredResponse, begin,
};
use redis::AsyncCommands;

use crate::common::{Store as RedisStore, standalone_store};

const TRICKY: &[&str] = &[
    "\"", "'", "]]", "\n", "%s%d", "{", "}", "{x}", "]]--[[", "\0\r\n",
];

fn req(actor: &str, op: &str, key: &str) -> ClaimRequest {
    let fingerprint = Fingerprint::builder("POST", "/").body(b"{}");
    ClaimRequest::new(
        actor,
        Operation::new(op, "v\"1'"),
        Key::parse(key.as_bytes()).unwrap(),
        fingerprint,
    )
    .lease(LONG)
    .retention(LONG)
    .request_id("req\"]]\n%{}")
}

async fn execute_and_complete(store: &RedisStore, req: &ClaimRequest, body: String) {
    let Begin::Execute(claim) = begin(store, req, ExpiredLease::TakeOver).await.unwrap() else {
        panic!("expected {body} to execute")
    };
    let response = StoredResponse::new(201, body).with_header("x-raw", &b"\xff\x00\"]]"[..]);
    store.complete(&claim, &response).await.unwrap();
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis])]
async fn tricky_and_long_scopes_round_trip_and_stay_apart() {
    let store = standalone_store().await;
    let run = uuid::Uuid::new_v4().to_string();
    let long_key: String = "%\"'{}]]".chars().cycle().take(MAX_KEY_LEN).collect();
    let mut requests = Vec::new();
    for (i, tricky) in TRICKY.iter().enumerate() {
        let actor = format!("{run}{tricky}");
        requests.push(req(&actor, "op", "k"));
        requests.push(req(&run, &format!("op{tricky}"), "k"));
        if tricky.bytes().all(|b| b.is_ascii_graphic()) {
            requests.push(req(&run, "op", &format!("k{i}{tricky}")));
        }
    }
    requests.push(req(
        &format!("{run}{}", "é\"\n".repeat(4096)),
        "op",
        &long_key,
    ));
    requests.push(req(&run, &"}{".repeat(2048), &long_key));
    for (i, r) in requests.iter().enumerate() {
        execute_and_complete(&store, r, format!("body-{i}")).await;
    }
    for (i, r) in requests.iter().enumerate() {
        let Begin::Replay(replayed) = begin(&store, r, ExpiredLease::TakeOver).await.unwrap()
        else {
            panic!("expected request {i} to replay")
        };
        assert_eq!(replayed.body, format!("body-{i}"));
        let record = store.lookup(&r.scope).await.unwrap().unwrap();
        assert_eq!(record.request_id.as_deref(), Some("req\"]]\n%{}"));
        assert_eq!(record.version, "v\"1'");
    }
}

/// Were two scopes' digests ever to collide, the second would meet a hash holding another
/// scope: every script compares the stored scope and refuses, instead of answering for it.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis])]
async fn a_hash_of_another_scope_is_refused_not_confused() {
    let store = standalone_store().await;
    let mine = req(&uuid::Uuid::new_v4().to_string(), "op", "k");
    let theirs = req(&uuid::Uuid::new_v4().to_string(), "op", "k");
    execute_and_complete(&store, &theirs, "theirs".into()).await;
    // Copy their hash to my key, as a collision would leave it.
    let mut conn = store.connection().clone();
    let fields: Vec<(Vec<u8>, Vec<u8>)> =
        conn.hgetall(store.record_key(&theirs.scope)).await.unwrap();
    let key = store.record_key(&mine.scope);
    let _: () = conn.hset_multiple(&key, &fields).await.unwrap();
    let _: () = conn.pexpire(&key, 60_000).await.unwrap();
    assert!(matches!(
        store.lookup(&mine.scope).await,
        Err(Error::Backend(_))
    ));
    assert!(matches!(
        store.try_claim(&mine).await,
        Err(Error::Backend(_))
    ));
    assert!(matches!(
        store.forget(&mine.scope).await,
        Err(Error::Backend(_))
    ));
    // A hash of the wrong type is an error too, not a panic.
    let _: () = conn.del(&key).await.unwrap();
    let _: () = conn.set_ex(&key, "junk", 60).await.unwrap();
    assert!(matches!(
        store.lookup(&mine.scope).await,
        Err(Error::Backend(_))
    ));
    let _: () = conn.del(&key).await.unwrap();
}
