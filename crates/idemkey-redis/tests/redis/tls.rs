//! TLS (`rediss://`): a `redis-server` with a TLS port and a certificate from a CA the test
//! makes with `openssl`; the store trusts that CA alone, and refuses the server without it.

use idemkey_core::testkit::request;
use idemkey_core::{Begin, ExpiredLease, Store, StoredResponse, begin};
use idemkey_redis::{RedisOptions, RedisStore};
use idemkey_test_support::process::redis::{Certificates, tls_server};

use crate::common::unique_prefix;

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_over_tls_trusts_the_ca_it_is_given() {
    let certs = Certificates::make();
    let (server, url) = tls_server(&certs);
    let options = RedisOptions::new()
        .prefix(unique_prefix())
        .tls_root_certificate(certs.ca())
        .replay_cache(1 << 20);
    let store = RedisStore::connect_with(&url, &options).await.unwrap();
    let req = request("{}");
    let Begin::Execute(claim) = begin(&store, &req, ExpiredLease::TakeOver).await.unwrap() else {
        panic!("expected to execute");
    };
    store
        .complete(&claim, &StoredResponse::new(201, "over tls"))
        .await
        .unwrap();
    let found = store.lookup(&req.scope).await.unwrap().unwrap();
    assert_eq!(found.record_id, claim.record_id);
    // The scripts ran on the TLS port: the plain port's client saw none of them but its own.
    assert!(server.calls("evalsha") + server.calls("eval") >= 2);
    assert!(store.secret().await.unwrap().len() >= 32);
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_whose_ca_is_not_trusted_is_refused() {
    let certs = Certificates::make();
    let (_server, url) = tls_server(&certs);
    // The system's roots do not hold the test's CA.
    let refused = RedisStore::connect_with(&url, &RedisOptions::new()).await;
    let error = refused.unwrap_err().to_string();
    assert!(error.contains("UnknownIssuer"), "{error}");
    // Nor does another CA.
    let other = Certificates::make();
    let options = RedisOptions::new().tls_root_certificate(other.ca());
    let error = RedisStore::connect_with(&url, &options).await.unwrap_err();
    assert!(
        error.to_string().contains("invalid peer certificate"),
        "{error}"
    );
}
