//! The conformance suite on a three-master cluster of this process's own, and records spread
//! over its slots.

use idemkey_core::testkit::{LONG, request};
use idemkey_core::{Store, TryClaim};
use idemkey_test_support::process::redis::{Cluster, cli};

use crate::common::{Store as RedisStore, store_at};

/// A store on the shared cluster (started by the first test that asks for it).
async fn store() -> RedisStore {
    let cluster = tokio::task::spawn_blocking(Cluster::get).await.unwrap();
    store_at(&cluster.url()).await
}

idemkey_core::store_conformance_suite!(
    store(),
    test: idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis_server]),
    // A cluster keeps no owners' heartbeats: claims live by their leases alone.
    except: [
        sweep_deletes_only_expired_records_in_batches,
        stale_owner_is_taken_over_before_its_lease_ends,
        an_outage_longer_than_the_grace_stales_no_one,
        a_claim_of_an_owner_without_heartbeat_keeps_its_lease,
    ]
);

/// Every script touches the one slot of its record's hash tag, wherever that slot lives: the
/// records of 30 scopes land on every master.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis_server])]
async fn records_spread_over_every_master() {
    let store = store().await;
    let mut keys = Vec::new();
    for _ in 0..30 {
        let req = request("{}").lease(LONG);
        assert!(matches!(
            store.try_claim(&req).await.unwrap(),
            TryClaim::Claimed(_)
        ));
        keys.push(store.record_key(&req.scope));
    }
    for node in &Cluster::get().nodes {
        let here = keys
            .iter()
            .filter(|key| cli(node.port, &["EXISTS", key]).trim() == "1")
            .count();
        assert!(here > 0, "no record on the master at port {}", node.port);
    }
}
