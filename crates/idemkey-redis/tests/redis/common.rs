//! The store the tests use: on the standalone server, or at any URL, under a key prefix of
//! its own. The servers themselves are `idemkey_test_support::process::redis`'s.

use idemkey_redis::{RedisConnection, RedisOptions, RedisStore};
use idemkey_test_support::runner::needs::redis_url;

/// The store every test makes.
pub(crate) type Store = RedisStore<RedisConnection>;

/// A key prefix of its own for every store a test makes, so runs and tests never meet.
pub(crate) fn unique_prefix() -> String {
    format!("idemkey-test-{}", uuid::Uuid::new_v4())
}

/// A store on the standalone server, under a prefix of its own.
pub(crate) async fn standalone_store() -> Store {
    let url = redis_url();
    store_at(&url).await
}

/// A store at `url` under a prefix of its own.
pub(crate) async fn store_at(url: &str) -> Store {
    let options = RedisOptions::new().prefix(unique_prefix());
    RedisStore::connect_with(url, &options).await.unwrap()
}
