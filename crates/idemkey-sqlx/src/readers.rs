//! The connections a store keeps for its lookups (and, where claims are not grouped, lease
//! mode's claims), beside its pool.
//!
//! sqlx gives every pooled connection back with a round trip (a ping: a message to SQLite's
//! worker thread and back, or a query to the server), to find the connections that a
//! cancelled statement left in an unknown state. A lookup is one short read, the statement
//! every replay makes: when it ends, its connection is known to be idle, so the store keeps
//! it for the next lookup and skips that round trip, about a fifth of a replay's CPU. A
//! lookup that does not end (cancelled, or failed) does not give its connection back: it is
//! closed, never reused. A kept connection may die while idle (a restarted server), so a
//! lookup that failed on one runs once more on a connection of the pool
//! (`SqlxStore::lookup_kept`).
//!
//! The kept connections are opened by the pool and detached from it (the pool may open
//! others in their place), so they never hold back the pool's other users.

use std::mem;
use std::ops::{Deref, DerefMut};
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use sqlx::Connection;
use sqlx::pool::PoolConnection;

use crate::Backend;

/// How many connections a store keeps for its lookups, idle or lent; a lookup that finds none
/// idle takes one from the pool. Replays of one key under 16 clients reach 0.84 of a GET with
/// 4, 0.88-0.99 with 8, and no more with 16.
pub(crate) const KEPT: usize = 8;

/// The idle connections kept for lookups, shared by a store's clones.
pub(crate) struct Readers<DB: Backend> {
    idle: Mutex<Idle<DB>>,
}

struct Idle<DB: Backend> {
    /// Each with when it was last known sound: when the pool handed it out.
    conns: Vec<(DB::Connection, Instant)>,
    /// How many kept connections a lookup holds: with `conns`, never more than [`KEPT`], so
    /// that each one comes back to room of its own.
    lent: usize,
    /// Once the store is closed, nothing is kept.
    closed: bool,
}

impl<DB: Backend> Default for Readers<DB> {
    fn default() -> Self {
        Self {
            idle: Mutex::new(Idle {
                conns: Vec::new(),
                lent: 0,
                closed: false,
            }),
        }
    }
}

impl<DB: Backend> std::fmt::Debug for Readers<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Readers")
            .field("idle", &self.lock().conns.len())
            .finish()
    }
}

impl<DB: Backend> Readers<DB> {
    /// A connection for one lookup: a kept one that is still fit for use, else one from
    /// `pool`. Give it back with [`Reader::done`] once the lookup ended.
    pub(crate) async fn reader(&self, pool: &sqlx::Pool<DB>) -> sqlx::Result<Reader<'_, DB>> {
        let held = match self.take() {
            Some((conn, since)) => Held::Kept(conn, since),
            None => {
                let since = Instant::now();
                Held::Pooled(pool.acquire().await?, since)
            }
        };
        Ok(Reader {
            readers: self,
            held,
        })
    }

    /// The last kept connection that the backend still trusts, lent to a lookup; the others
    /// are closed.
    fn take(&self) -> Option<(DB::Connection, Instant)> {
        loop {
            let mut idle = self.lock();
            let (conn, since) = idle.conns.pop()?;
            if DB::reusable(&conn, since) {
                idle.lent += 1;
                return Some((conn, since));
            }
            drop(idle);
            close::<DB>(conn);
        }
    }

    /// A lent connection is back from a lookup that ended: kept again, unless the store
    /// closed meanwhile.
    fn give_back(&self, conn: DB::Connection, since: Instant) {
        let mut idle = self.lock();
        idle.lent -= 1;
        if !idle.closed {
            idle.conns.push((conn, since));
            return;
        }
        drop(idle);
        close::<DB>(conn);
    }

    /// A lent connection is gone with a lookup that did not end.
    fn lost(&self) {
        self.lock().lent -= 1;
    }

    /// A pooled connection is back from a lookup that ended: detached and kept if fewer than
    /// [`KEPT`] are, given back to the pool otherwise.
    fn adopt(&self, conn: PoolConnection<DB>, since: Instant) {
        let mut idle = self.lock();
        if !idle.closed && idle.conns.len() + idle.lent < KEPT {
            idle.conns.push((conn.detach(), since));
            return;
        }
        drop(idle);
        // Back to the pool, which tests it.
        drop(conn);
    }

    /// Closes the kept connections, and keeps none from now on.
    pub(crate) async fn close(&self) {
        let conns = {
            let mut idle = self.lock();
            idle.closed = true;
            mem::take(&mut idle.conns)
        };
        for (conn, _) in conns {
            let _ = conn.close().await;
        }
    }

    /// The lock, whatever panicked while holding it: the list is valid after any push or pop.
    fn lock(&self) -> std::sync::MutexGuard<'_, Idle<DB>> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Closes a connection that is not kept, gracefully where a runtime can run the close.
fn close<DB: Backend>(conn: DB::Connection) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(async move {
            let _ = conn.close().await;
        });
    }
}

/// One lookup's connection. Dropped without [`Reader::done`], it is not kept: a kept one
/// is closed, a pooled one goes back to the pool (which tests it).
pub(crate) struct Reader<'r, DB: Backend> {
    readers: &'r Readers<DB>,
    held: Held<DB>,
}

enum Held<DB: Backend> {
    Kept(DB::Connection, Instant),
    Pooled(PoolConnection<DB>, Instant),
    Given,
}

impl<DB: Backend> Reader<'_, DB> {
    /// Whether the connection is one the store kept, rather than one fresh from the pool.
    pub(crate) fn was_kept(&self) -> bool {
        matches!(self.held, Held::Kept(..))
    }

    /// The lookup ended: the connection is idle, and kept for the next one if there is room.
    pub(crate) fn done(mut self) {
        match mem::replace(&mut self.held, Held::Given) {
            Held::Kept(conn, since) => self.readers.give_back(conn, since),
            Held::Pooled(conn, since) => self.readers.adopt(conn, since),
            Held::Given => {}
        }
    }
}

impl<DB: Backend> Drop for Reader<'_, DB> {
    fn drop(&mut self) {
        if let Held::Kept(conn, _) = mem::replace(&mut self.held, Held::Given) {
            self.readers.lost();
            close::<DB>(conn);
        }
    }
}

impl<DB: Backend> Deref for Reader<'_, DB> {
    type Target = DB::Connection;

    fn deref(&self) -> &DB::Connection {
        match &self.held {
            Held::Kept(conn, _) => conn,
            Held::Pooled(conn, _) => conn,
            Held::Given => unreachable!("a reader is used only until it is given back"),
        }
    }
}

impl<DB: Backend> DerefMut for Reader<'_, DB> {
    fn deref_mut(&mut self) -> &mut DB::Connection {
        match &mut self.held {
            Held::Kept(conn, _) => conn,
            Held::Pooled(conn, _) => conn,
            Held::Given => unreachable!("a reader is used only until it is given back"),
        }
    }
}

#[cfg(all(test, feature = "sqlite"))]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::time::Duration;

    use sqlx::Sqlite;
    use sqlx::sqlite::{SqlitePool, SqlitePoolOptions};

    use super::*;

    async fn pool(max: u32) -> SqlitePool {
        SqlitePoolOptions::new()
            .max_connections(max)
            .connect("sqlite::memory:")
            .await
            .unwrap()
    }

    fn kept(readers: &Readers<Sqlite>) -> usize {
        readers.lock().conns.len()
    }

    /// A lookup that ended keeps its connection, out of the pool; the next lookup takes it
    /// and asks the pool for nothing.
    #[tokio::test]
    async fn an_ended_lookup_keeps_its_connection_for_the_next() {
        let (pool, readers) = (pool(2).await, Readers::<Sqlite>::default());
        let reader = readers.reader(&pool).await.unwrap();
        assert_eq!(pool.size(), 1);
        reader.done();
        assert_eq!((kept(&readers), pool.size()), (1, 0), "kept, and detached");

        let mut reader = readers.reader(&pool).await.unwrap();
        assert_eq!((kept(&readers), pool.size()), (0, 0), "the kept one, taken");
        sqlx::query("SELECT 1").execute(&mut *reader).await.unwrap();
        reader.done();
        assert_eq!((kept(&readers), pool.size()), (1, 0));
    }

    /// A lookup that did not end (cancelled, or failed) keeps nothing: a kept connection is
    /// closed, a pooled one goes back to the pool, which tests it.
    #[tokio::test]
    async fn a_lookup_that_did_not_end_keeps_nothing() {
        let (pool, readers) = (pool(2).await, Readers::<Sqlite>::default());
        readers.reader(&pool).await.unwrap().done();
        drop(readers.reader(&pool).await.unwrap());
        assert_eq!(kept(&readers), 0, "the kept one, closed");

        drop(readers.reader(&pool).await.unwrap());
        assert_eq!(kept(&readers), 0);
        // The pool tests a returned connection in a task of its own.
        let back = tokio::time::timeout(Duration::from_secs(5), async {
            while pool.num_idle() == 0 {
                tokio::task::yield_now().await;
            }
        });
        back.await.expect("the pooled one is back in the pool");
    }

    /// No more than [`KEPT`] are kept: the others go back to the pool.
    #[tokio::test]
    async fn at_most_kept_are_kept() {
        let (pool, readers) = (pool(16).await, Readers::<Sqlite>::default());
        let mut held = Vec::new();
        for _ in 0..=KEPT {
            held.push(readers.reader(&pool).await.unwrap());
        }
        held.into_iter().for_each(Reader::done);
        assert_eq!((kept(&readers), pool.size()), (KEPT, 1));
    }

    /// A lookup that took a pooled connection while every kept one was lent does not take
    /// their room: each kept one comes back to room of its own, and none is closed.
    #[tokio::test]
    async fn kept_connections_come_back_to_room_of_their_own() {
        let (pool, readers) = (pool(16).await, Readers::<Sqlite>::default());
        let mut first = Vec::new();
        for _ in 0..KEPT {
            first.push(readers.reader(&pool).await.unwrap());
        }
        first.into_iter().for_each(Reader::done);
        let mut lent = Vec::new();
        for _ in 0..KEPT {
            lent.push(readers.reader(&pool).await.unwrap());
        }
        assert_eq!((kept(&readers), pool.size()), (0, 0), "all lent");

        let pooled = readers.reader(&pool).await.unwrap();
        assert_eq!(pool.size(), 1);
        pooled.done();
        assert_eq!(kept(&readers), 0, "no room of its own");
        lent.into_iter().for_each(Reader::done);
        assert_eq!(kept(&readers), KEPT);
    }

    /// Once closed, the kept connections are closed and nothing more is kept.
    #[tokio::test]
    async fn nothing_is_kept_once_closed() {
        let (pool, readers) = (pool(2).await, Readers::<Sqlite>::default());
        let open = readers.reader(&pool).await.unwrap();
        readers.reader(&pool).await.unwrap().done();
        readers.close().await;
        assert_eq!(kept(&readers), 0);
        open.done();
        assert_eq!(kept(&readers), 0);
    }
}
