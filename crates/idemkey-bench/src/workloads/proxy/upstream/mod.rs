//! The API behind the proxy in the proxy workloads, served by hyper on a runtime and an OS
//! thread of its own in this process, its notes kept in one of three ways (`--upstream`):
//! in memory ([`memory`]: as little as an API can do, so that what a request through the
//! proxy costs more than one straight to it is the proxy's), or one row per create in a
//! SQLite file of its own ([`sqlite`]) at `synchronous = NORMAL` or `FULL`: APIs whose own
//! write the proxy's is weighed against.
//!
//! `POST /v1/notes` takes any JSON body and answers 201 with `{"id": "N", "note": BODY}` and
//! `Location: /v1/notes/N`; `GET /v1/notes/N` answers that again, or 404. It ignores every
//! header, the credential and the proxy's `Idempotency-Derived-Key` included.

mod memory;
mod serve;
mod sqlite;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::thread::JoinHandle;

use anyhow::Context;
use bytes::Bytes;
use clap::ValueEnum;
use sqlx::sqlite::SqliteSynchronous;
use tokio::sync::oneshot;

use crate::harness::cpu;

/// What keeps the notes of the API behind the proxy (`--upstream`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum UpstreamKind {
    /// In memory: no database, the cheapest API there is.
    Memory,
    /// A row per create in a SQLite file, WAL, `synchronous = NORMAL`: a fast API (no fsync
    /// per create; a power cut may lose its last acknowledged creates).
    SqliteNormal,
    /// A row per create in a SQLite file, WAL, `synchronous = FULL`: an API that keeps what
    /// it acknowledges (an fsync per create).
    SqliteFull,
}

impl UpstreamKind {
    /// Its name on the command line and in the reports.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Memory => "memory",
            Self::SqliteNormal => "sqlite-normal",
            Self::SqliteFull => "sqlite-full",
        }
    }

    /// SQLite's sync level and the name prefix of the connections' threads (at most 15
    /// bytes with their number, as Linux keeps thread names); `None` in memory.
    fn sqlite(self) -> Option<(SqliteSynchronous, &'static str)> {
        match self {
            Self::Memory => None,
            Self::SqliteNormal => Some((SqliteSynchronous::Normal, "api-db-normal")),
            Self::SqliteFull => Some((SqliteSynchronous::Full, "api-db-full")),
        }
    }
}

/// The running upstream; stopped, and its SQLite file removed, when dropped.
pub(crate) struct Upstream {
    /// Where it listens.
    pub(crate) addr: SocketAddr,
    /// What keeps its notes.
    pub(crate) kind: UpstreamKind,
    /// Its HTTP thread's id, for its CPU time (`None` elsewhere than Linux).
    tid: Option<u32>,
    /// The directory of its SQLite file.
    dir: Option<PathBuf>,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Upstream {
    /// Starts it on a free port of 127.0.0.1, on a thread with a single-threaded runtime (the
    /// machine has few cores, and one is more than this API needs); a SQLite upstream's file
    /// is made in a new directory `name` of the system's temporary directory.
    pub(crate) async fn start(kind: UpstreamKind, name: &str) -> anyhow::Result<Self> {
        let dir = kind.sqlite().map(|_| std::env::temp_dir().join(name));
        if let Some(dir) = &dir {
            std::fs::create_dir(dir)
                .with_context(|| format!("cannot make the directory {}", dir.display()))?;
        }
        let mut upstream = Self {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            kind,
            tid: None,
            dir,
            shutdown: None,
            thread: None,
        };
        let (ready_tx, ready_rx) = oneshot::channel();
        let (shutdown, stop) = oneshot::channel();
        let file = upstream.dir.as_ref().map(|dir| dir.join("notes.db"));
        upstream.shutdown = Some(shutdown);
        upstream.thread = Some(
            std::thread::Builder::new()
                .name("bench-upstream".into())
                .spawn(move || serve::on_this_thread(kind, file, ready_tx, stop))
                .context("cannot start the upstream's thread")?,
        );
        // On an error `upstream` is dropped: its thread is joined, its directory removed.
        (upstream.addr, upstream.tid) = ready_rx
            .await
            .context("the upstream stopped before listening")??;
        Ok(upstream)
    }

    /// The threads doing its work: its HTTP thread and its SQLite connections'; `None` if
    /// they cannot be told (elsewhere than Linux).
    pub(crate) fn threads(&self) -> Option<Vec<u32>> {
        let mut threads = vec![self.tid?];
        if let Some((_, prefix)) = self.kind.sqlite() {
            threads.extend(cpu::threads_named(prefix));
        }
        Some(threads)
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            // Its runtime drops every connection's task as it ends, and the SQLite
            // connections are closed first: this is quick.
            let _ = thread.join();
        }
        if let Some(dir) = self.dir.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// The answer that shows note `id` of JSON `body`: `{"id":"ID","note":BODY}`.
fn shown(id: u64, body: &[u8]) -> Bytes {
    let mut answer = Vec::with_capacity(body.len() + 32);
    answer.extend_from_slice(format!(r#"{{"id":"{id}","note":"#).as_bytes());
    answer.extend_from_slice(body);
    answer.push(b'}');
    Bytes::from(answer)
}

#[cfg(test)]
mod tests;
