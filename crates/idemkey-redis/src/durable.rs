//! Waiting, after a completion or a fresh claim, until Redis has made it durable: on replicas
//! (`WAIT`), on disk (`WAITAOF`), or both.
//!
//! A fresh claim waits before it returns, so before the handler or the forward starts: a
//! claim lost in a failover would be claimed again under a new record id, so new derived
//! keys, and an external call made under the first would be made again under others. A
//! completion is marked waiting in its record (`dw`) until its wait is done, and nobody
//! answers from it meanwhile: a replay, a replay-cache fill or a waiting duplicate read it as
//! in flight (`lua/common.lua`'s `reply`).
//!
//! Both commands block the client that sends them and count only that client's own writes. On
//! the store's shared, multiplexed connection a wait would hold every other request's commands
//! behind it for a replication round trip or an fsync, so a completion that waits goes over a
//! connection of its own, taken from a small pool of idle ones.

use std::sync::Mutex;
use std::time::Duration;

use idemkey_core::{Error, Result};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Cmd, Value};

use crate::error::{Sent, store_error, timed_out};
use crate::store::ms;

/// Idle connections kept for waiting completions; more are opened when needed, and closed
/// when given back to a full pool.
const MAX_IDLE: usize = 16;

/// What a completion waits for before it returns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Wait {
    /// Replicas that must acknowledge the completion (with `fsync`: must have written it to
    /// their own append-only file).
    pub(crate) replicas: u32,
    /// Whether the server itself must have fsynced the completion to its append-only file.
    pub(crate) fsync: bool,
    /// The longest wait; past it the completion stands (it is on the master) with a warning.
    pub(crate) timeout: Duration,
}

impl Wait {
    /// Whether there is anything to wait for.
    pub(crate) fn is_set(&self) -> bool {
        self.fsync || self.replicas > 0
    }

    /// `WAITAOF 1 <replicas> <ms>` or `WAIT <replicas> <ms>`. At least one millisecond: zero
    /// would mean forever.
    fn command(&self) -> Cmd {
        let timeout = ms(self.timeout).max(1);
        let mut cmd = if self.fsync {
            let mut cmd = redis::cmd("WAITAOF");
            cmd.arg(1);
            cmd
        } else {
            redis::cmd("WAIT")
        };
        cmd.arg(self.replicas).arg(timeout);
        cmd
    }

    /// Whether a reply of [`Self::command`] shows everything asked for.
    fn met(&self, reply: &Value) -> Result<bool> {
        let count = |value: &Value| match value {
            Value::Int(n) => Ok(*n),
            other => Err(Error::Backend(
                format!("an unexpected reply to a wait: {other:?}").into(),
            )),
        };
        let replicas = i64::from(self.replicas);
        match reply {
            Value::Array(counts) if self.fsync && counts.len() == 2 => {
                Ok(count(&counts[0])? >= 1 && count(&counts[1])? >= replicas)
            }
            other if !self.fsync => Ok(count(other)? >= replicas),
            other => Err(Error::Backend(
                format!("an unexpected reply to WAITAOF: {other:?}").into(),
            )),
        }
    }
}

/// The wait and the connections it runs on.
pub(crate) struct Durable {
    wait: Wait,
    client: redis::Client,
    config: AsyncConnectionConfig,
    idle: Mutex<Vec<MultiplexedConnection>>,
}

impl std::fmt::Debug for Durable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Durable")
            .field("wait", &self.wait)
            .finish_non_exhaustive()
    }
}

impl Durable {
    /// Waits of `wait` over connections to `client`'s server, each connection attempt bounded
    /// by `connect` and each reply by `reply` (plus the wait itself).
    ///
    /// Checked once here: a server that cannot do what is asked (no append-only file, a
    /// version without `WAITAOF`) is refused now rather than at every completion.
    pub(crate) async fn new(
        wait: Wait,
        client: redis::Client,
        connect: Duration,
        reply: Duration,
    ) -> Result<Self> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(connect))
            .set_response_timeout(Some(reply + wait.timeout));
        let durable = Self {
            wait,
            client,
            config,
            idle: Mutex::default(),
        };
        let mut conn = durable.take().await?;
        let probe = Wait {
            replicas: 0,
            timeout: Duration::from_millis(1),
            ..wait
        };
        probe
            .command()
            .query_async::<Value>(&mut conn)
            .await
            .map_err(|e| Error::Backend(format!("the server cannot wait as asked: {e}").into()))?;
        if wait.fsync {
            refuse_fsync_no(&mut conn).await?;
        }
        durable.give_back(conn);
        Ok(durable)
    }

    /// The longest a wait runs on the server.
    pub(crate) fn timeout(&self) -> Duration {
        self.wait.timeout
    }

    /// An idle connection, or a new one.
    pub(crate) async fn take(&self) -> Result<MultiplexedConnection> {
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        match idle {
            Some(conn) => Ok(conn),
            None => self
                .client
                .get_multiplexed_async_connection_with_config(&self.config)
                .await
                .map_err(|e| store_error(e, Sent::Harmless)),
        }
    }

    /// Keeps `conn` for the next completion, unless enough are kept.
    pub(crate) fn give_back(&self, conn: MultiplexedConnection) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push(conn);
        }
    }

    /// Waits on `conn`, after the completion it sent. Whether everything asked for was met
    /// within the wait; an error if the server could not be asked.
    pub(crate) async fn wait(
        &self,
        conn: &mut MultiplexedConnection,
        bound: Duration,
    ) -> Result<bool> {
        let command = self.wait.command();
        // The reply comes after the wait's timeout at the latest; `bound` covers a lost one.
        let reply = tokio::time::timeout(self.wait.timeout + bound, command.query_async(conn))
            .await
            .map_err(|_| timed_out(Sent::Harmless, bound))?
            .map_err(|e| store_error(e, Sent::Harmless))?;
        self.wait.met(&reply)
    }
}

/// Refuses a server with `appendfsync no`: it fsyncs only when the kernel flushes, so every
/// completion would wait its whole timeout. (With `everysec` a waiting client makes the server
/// fsync at once.) A server that hides `CONFIG` is taken on trust.
async fn refuse_fsync_no(conn: &mut MultiplexedConnection) -> Result<()> {
    let mut get = redis::cmd("CONFIG");
    get.arg("GET").arg("appendfsync");
    let Ok(reply) = get.query_async::<Vec<String>>(conn).await else {
        return Ok(());
    };
    if reply.get(1).is_some_and(|policy| policy == "no") {
        return Err(Error::Backend(
            "the server cannot wait as asked: appendfsync is no, so each completion would wait \
             its whole timeout for an fsync; use appendfsync everysec or always"
                .into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn wait(replicas: u32, fsync: bool) -> Wait {
        Wait {
            replicas,
            fsync,
            timeout: Duration::ZERO,
        }
    }

    fn args(cmd: &Cmd) -> Vec<String> {
        cmd.args_iter()
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                _ => "(not simple)".into(),
            })
            .collect()
    }

    #[test]
    fn commands_never_wait_forever() {
        assert_eq!(args(&wait(2, false).command()), ["WAIT", "2", "1"]);
        assert_eq!(args(&wait(0, true).command()), ["WAITAOF", "1", "0", "1"]);
        let long = Wait {
            timeout: Duration::from_millis(1500),
            ..wait(1, true)
        };
        assert_eq!(args(&long.command()), ["WAITAOF", "1", "1", "1500"]);
    }

    #[test]
    fn replies_are_compared_with_what_was_asked() {
        assert!(wait(1, false).met(&Value::Int(1)).unwrap());
        assert!(!wait(2, false).met(&Value::Int(1)).unwrap());
        let aof = |local, replicas| Value::Array(vec![Value::Int(local), Value::Int(replicas)]);
        assert!(wait(0, true).met(&aof(1, 0)).unwrap());
        assert!(!wait(0, true).met(&aof(0, 0)).unwrap());
        assert!(!wait(1, true).met(&aof(1, 0)).unwrap());
        assert!(wait(0, true).met(&Value::Int(1)).is_err());
        assert!(!wait(0, false).is_set());
    }
}
