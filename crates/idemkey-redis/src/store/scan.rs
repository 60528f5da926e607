//! [`Store::forget_actor`](idemkey_core::Store::forget_actor) on Redis: a record's key is a
//! digest of its whole scope, and no index of an actor's records is kept for every store, so
//! its records are found by `SCAN` over the store's record keys, on every master of a
//! cluster, and each one is checked and deleted by a script on its own key.
//!
//! The cost is one pass over every record of the store, whoever's: a `SCAN` per
//! [`SCAN_COUNT`] keys, then one script per key found, sent concurrently. Records do not
//! block meanwhile: each script is one key's. A record written during the pass may or may not
//! be seen (`SCAN`'s own guarantee: a key present throughout is seen at least once), and in a
//! cluster a slot migrating during the pass may hide its keys: run it again to be sure.

use std::any::Any;
use std::collections::HashSet;
use std::sync::LazyLock;

use idemkey_core::{ActorForgotten, Error, Result};
use redis::aio::ConnectionLike;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, FromRedisValue, Script, Value};
use tokio::task::JoinSet;

use super::RedisStore;
use crate::RedisConnection;
use crate::error::{Sent, store_error, timed_out};

/// How many keys each `SCAN` asks for (a hint to the server, which may return more or fewer).
const SCAN_COUNT: u32 = 1000;

/// `lua/forget_actor.lua`, after the shared helpers.
static FORGET_ACTOR: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "#!lua\n{}\n{}",
        include_str!("../../lua/common.lua"),
        include_str!("../../lua/forget_actor.lua")
    ))
});

/// Where the record keys are: the one server, or each master of a cluster, reached through
/// the first slot it serves.
enum Nodes {
    Server,
    Cluster(ClusterConnection, Vec<u16>),
}

/// What the pass found so far.
#[derive(Default)]
struct Tally {
    forgotten: u64,
    /// The keys of the actor's records kept: a set, as `SCAN` may return a key twice.
    kept: HashSet<String>,
}

impl<C> RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// Deletes the actor's completed (and expired) records on every node; see the module.
    pub(crate) async fn forget_actor_by_scan(&self, actor: &str) -> Result<ActorForgotten> {
        let mut tally = Tally::default();
        match self.nodes().await? {
            Nodes::Server => {
                self.pass(actor, &mut tally, |cmd| {
                    let mut conn = self.conn.clone();
                    async move { cmd.query_async::<Value>(&mut conn).await }
                })
                .await?;
            }
            Nodes::Cluster(cluster, slots) => {
                for slot in slots {
                    let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(
                        Route::new(slot, SlotAddr::Master),
                    ));
                    self.pass(actor, &mut tally, |cmd| {
                        let (mut cluster, route) = (cluster.clone(), route.clone());
                        async move { cluster.route_command(cmd, route).await }
                    })
                    .await?;
                }
            }
        }
        Ok(ActorForgotten::new(
            tally.forgotten,
            tally.kept.len() as u64,
        ))
    }

    /// The nodes to scan. A connection this store cannot route per node is refused if it
    /// reaches a cluster: scanning one node of it would silently miss the others' records.
    async fn nodes(&self) -> Result<Nodes> {
        let conn: &dyn Any = &self.conn;
        let cluster = match conn.downcast_ref::<RedisConnection>() {
            Some(RedisConnection::Cluster(cluster)) => Some(cluster.clone()),
            Some(RedisConnection::Standalone(_)) => None,
            None => conn.downcast_ref::<ClusterConnection>().cloned(),
        };
        if let Some(mut cluster) = cluster {
            let slots = redis::cmd("CLUSTER").arg("SLOTS").clone();
            let random = RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random);
            let reply = self.bounded(cluster.route_command(slots, random)).await?;
            return Ok(Nodes::Cluster(cluster, master_slots(reply)?));
        }
        let info = self
            .bounded(
                redis::cmd("INFO")
                    .arg("cluster")
                    .query_async::<Value>(&mut self.conn.clone()),
            )
            .await?;
        let info = String::from_redis_value(info).unwrap_or_default();
        if info.contains("cluster_enabled:1") {
            return Err(Error::Backend(
                "forgetting an actor's records on a cluster needs a cluster connection \
                 (RedisStore::connect with redis+cluster://)"
                    .into(),
            ));
        }
        Ok(Nodes::Server)
    }

    /// One `SCAN` pass over a node's record keys (`send` runs a command there), each key
    /// found checked and deleted by the script, concurrently.
    async fn pass<F, Fut>(&self, actor: &str, tally: &mut Tally, send: F) -> Result<()>
    where
        F: Fn(Cmd) -> Fut,
        Fut: Future<Output = redis::RedisResult<Value>>,
    {
        let pattern = self.keys.record_pattern();
        let mut cursor = "0".to_owned();
        loop {
            let mut scan = redis::cmd("SCAN");
            scan.arg(&cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(SCAN_COUNT)
                .arg("TYPE")
                .arg("hash");
            let reply = self.bounded(send(scan)).await?;
            let (next, keys) = <(String, Vec<String>)>::from_redis_value(reply)
                .map_err(|e| Error::Backend(format!("unexpected SCAN reply: {e}").into()))?;
            self.forget_keys(actor, keys, tally).await?;
            if next == "0" {
                return Ok(());
            }
            cursor = next;
        }
    }

    /// Runs the script on each key, concurrently: the connection pipelines them.
    async fn forget_keys(&self, actor: &str, keys: Vec<String>, tally: &mut Tally) -> Result<()> {
        let mut tasks = JoinSet::new();
        for key in keys {
            let (store, actor) = (self.clone(), actor.to_owned());
            tasks.spawn(async move {
                let mut invocation = FORGET_ACTOR.key(&key);
                invocation.arg(actor.as_bytes());
                let reply = store.run(&invocation, Sent::Harmless).await;
                // Whatever the reply: a deletion whose reply was lost must not leave a copy.
                if let Some(cache) = &store.cache {
                    cache.forget(&key);
                }
                (key, reply)
            });
        }
        let mut failed = None;
        while let Some(joined) = tasks.join_next().await {
            let (key, reply) = joined.map_err(|e| Error::Backend(Box::new(e)))?;
            match reply.and_then(|value| i64::from_redis_value(value).map_err(corrupt)) {
                Ok(1) => tally.forgotten += 1,
                Ok(2) => {
                    tally.kept.insert(key);
                }
                Ok(_) => {}
                Err(error) => failed = Some(error),
            }
        }
        failed.map_or(Ok(()), Err)
    }

    /// `future` bounded by the store's timeout, its error classified.
    async fn bounded<T>(&self, future: impl Future<Output = redis::RedisResult<T>>) -> Result<T> {
        match tokio::time::timeout(self.timeout, future).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(store_error(error, Sent::Harmless)),
            Err(_) => Err(timed_out(Sent::Harmless, self.timeout)),
        }
    }
}

fn corrupt(error: redis::ParsingError) -> Error {
    Error::Backend(format!("unexpected reply from Redis: {error}").into())
}

/// The first slot of each master in a `CLUSTER SLOTS` reply: `[start, end, [host, port, id],
/// replicas...]` per range; a master serving several ranges is scanned once.
fn master_slots(reply: Value) -> Result<Vec<u16>> {
    let ranges = Vec::<Value>::from_redis_value(reply).map_err(corrupt)?;
    let mut seen = HashSet::new();
    let mut slots = Vec::new();
    for range in ranges {
        let parts = Vec::<Value>::from_redis_value(range).map_err(corrupt)?;
        let (Some(start), Some(master)) = (parts.first(), parts.get(2)) else {
            return Err(Error::Backend("unexpected CLUSTER SLOTS reply".into()));
        };
        let start = u16::from_redis_value(start.clone()).map_err(corrupt)?;
        let node = Vec::<Value>::from_redis_value(master.clone()).map_err(corrupt)?;
        let host = node.first().cloned().map(Vec::<u8>::from_redis_value);
        let port = node.get(1).cloned().map(i64::from_redis_value);
        let address = (
            host.transpose().map_err(corrupt)?,
            port.transpose().map_err(corrupt)?,
        );
        if seen.insert(address) {
            slots.push(start);
        }
    }
    Ok(slots)
}
