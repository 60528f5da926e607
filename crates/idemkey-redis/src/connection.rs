//! One connection type for both deployments, so that a caller holds one store type whatever
//! the URL named.

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

/// A standalone server's reconnecting manager, or a cluster connection.
///
/// Both are cheap to clone and share their connections across clones.
#[derive(Clone)]
#[non_exhaustive]
pub enum RedisConnection {
    /// A standalone server (`redis://`, `rediss://`), reconnecting by itself after a drop.
    Standalone(ConnectionManager),
    /// A Redis Cluster (`redis+cluster://`), following slot moves and failovers.
    Cluster(ClusterConnection),
}

impl std::fmt::Debug for RedisConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Standalone(manager) => f.debug_tuple("Standalone").field(manager).finish(),
            Self::Cluster(_) => f.write_str("Cluster"),
        }
    }
}

impl ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Standalone(manager) => manager.req_packed_command(cmd),
            Self::Cluster(cluster) => cluster.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Standalone(manager) => manager.req_packed_commands(pipeline, offset, count),
            Self::Cluster(cluster) => cluster.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Standalone(manager) => manager.get_db(),
            Self::Cluster(cluster) => cluster.get_db(),
        }
    }
}
