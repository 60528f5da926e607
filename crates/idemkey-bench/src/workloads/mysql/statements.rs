//! The statements alone, on MySQL: what `idemkey serve` sends the database for a keyed create
//! and for a key-less one, in the run's mode and strategy, through sqlx on one connection per
//! worker, without HTTP, the idempotency layer or a pool, the two sides alternating in rounds
//! like the other workloads. Their ratio is what the database allows the service's
//! keyed / key-less create at best.
//!
//! The record's statements are the store's own (`Backend::lookup`, `try_claim`,
//! `insert_completed`, `complete`) and the note's the service's (`NotesDb`); only the texts
//! that begin a transaction are repeated here, from the MySQL store. Not sent here: the
//! `COM_PING` sqlx sends when a pooled connection goes back to its pool, one per create in
//! atomic mode (keyed or not), three per keyed and one per key-less create in lease mode.

use std::sync::Arc;
use std::time::SystemTime;

use anyhow::Context;
use idemkey_core::{ClaimRequest, Fingerprint, Key, Operation, RecordId, StoredResponse, TryClaim};
use idemkey_notes::{Mode, Note, NotesDb};
use idemkey_sqlx::{Backend, MySqlStore, Strategy};
use sqlx::mysql::MySqlConnection;
use sqlx::{Connection, MySql};
use tokio::sync::Mutex;

use super::dbstatus;
use crate::ctx::Ctx;
use crate::harness::report::{Ratio, WorkloadReport};
use crate::harness::runner::{Op, Worker};
use crate::workloads::ceiling::stored_201;

/// How the MySQL store begins a write transaction: one round trip.
const BEGIN_WRITE: &str = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION";

/// How claim-first's transaction begins: the claim's lock wait bound (5 s, the default) kept
/// apart from the session's own, then as [`BEGIN_WRITE`]. One round trip.
const BEGIN_CLAIM: &str = "SET @idemkey_lock_wait = CAST(COALESCE(@idemkey_lock_wait, \
     @@SESSION.innodb_lock_wait_timeout) AS UNSIGNED), SESSION innodb_lock_wait_timeout = 5; \
     SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION";

/// Puts the session's own lock wait back after claim-first's claim.
const RESTORE: &str = "SET SESSION innodb_lock_wait_timeout = CAST(@idemkey_lock_wait AS UNSIGNED)";

/// The actor of every row.
const ACTOR: &str = "bench";

/// What a keyed create sends, by mode and strategy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pattern {
    /// Commit-time: (lookup;) BEGIN; note; completed record; COMMIT.
    CommitTime { lookup: bool },
    /// Claim-first: lookup; BEGIN with the claim's bound; claim; restore; note; completion;
    /// COMMIT.
    ClaimFirst,
    /// Lease: lookup; claim (a commit); BEGIN; note; completion; COMMIT. Separate: lookup;
    /// claim; note; completion, each a commit of its own.
    Lease { separate: bool },
}

impl Pattern {
    /// The pattern of the service the run starts.
    pub(crate) fn of(mode: Mode, strategy: Strategy, lookup: bool, separate: bool) -> Self {
        match (mode, strategy) {
            (Mode::Lease, _) => Self::Lease { separate },
            (Mode::Atomic, Strategy::ClaimFirst) => Self::ClaimFirst,
            (Mode::Atomic, _) => Self::CommitTime { lookup },
        }
    }

    /// The keyed side's name: its statements, and the round trips they take.
    fn keyed_name(self) -> &'static str {
        match self {
            Self::CommitTime { lookup: true } => {
                "keyed, commit-time: lookup; BEGIN; note; record; COMMIT (5 round trips)"
            }
            Self::CommitTime { lookup: false } => {
                "keyed, commit-time, no lookup: BEGIN; note; record; COMMIT (4)"
            }
            Self::ClaimFirst => {
                "keyed, claim-first: lookup; BEGIN; claim; restore; note; complete; COMMIT (7)"
            }
            Self::Lease { separate: false } => {
                "keyed, lease: lookup; claim; BEGIN; note; complete; COMMIT (6, 2 commits)"
            }
            Self::Lease { separate: true } => {
                "keyed, lease, separate: lookup; claim; note; complete (4, 3 commits)"
            }
        }
    }

    /// The key-less side's name.
    fn plain_name(self) -> &'static str {
        match self {
            Self::Lease { .. } => "key-less, lease: note, autocommitted (1 round trip)",
            _ => "key-less, atomic: BEGIN; note; COMMIT (3 round trips)",
        }
    }
}

/// One connection per worker, shared by the two sides, which never run at once.
type Conns = Arc<Vec<Mutex<MySqlConnection>>>;

/// One create's statements, keyed or not.
struct Statements {
    conns: Conns,
    /// `None`: the key-less create's.
    keyed: Option<Pattern>,
    key_less_lease: bool,
    prefix: String,
    fingerprint: Fingerprint,
    response: StoredResponse,
}

impl Op for Statements {
    async fn call(&self, worker: &mut Worker) -> Result<usize, u16> {
        let seq = worker.next_seq();
        let key = format!("{}-{}-{seq}", self.prefix, worker.id);
        let Some(conn) = self.conns.get(worker.id) else {
            return Err(0);
        };
        let mut conn = conn.lock().await;
        let result = match self.keyed {
            Some(pattern) => self.keyed(&mut conn, pattern, &key).await,
            None => self.plain(&mut conn, &key).await,
        };
        result.map(|()| 0).map_err(|error| {
            tracing::warn!(error = %format!("{error:#}"), "statements failed");
            500
        })
    }
}

impl Statements {
    async fn plain(&self, conn: &mut MySqlConnection, key: &str) -> anyhow::Result<()> {
        let note = note(key);
        if self.key_less_lease {
            MySql::insert_note_once(conn, ACTOR, &note).await?;
            return Ok(());
        }
        let mut tx = conn.begin_with(BEGIN_WRITE).await?;
        MySql::insert_note(&mut tx, ACTOR, &note).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn keyed(
        &self,
        conn: &mut MySqlConnection,
        pattern: Pattern,
        key: &str,
    ) -> anyhow::Result<()> {
        let request = ClaimRequest::new(
            ACTOR,
            Operation::new(idemkey_notes::CREATE_NOTE.0, idemkey_notes::CREATE_NOTE.1),
            Key::parse(key.as_bytes())?,
            self.fingerprint,
        );
        let note = note(key);
        let looks_up = !matches!(pattern, Pattern::CommitTime { lookup: false });
        if looks_up && MySql::lookup(conn, &request.scope).await?.is_some() {
            anyhow::bail!("a fresh key has a record");
        }
        match pattern {
            Pattern::CommitTime { .. } => {
                let mut tx = conn.begin_with(BEGIN_WRITE).await?;
                MySql::insert_note(&mut tx, ACTOR, &note).await?;
                let inserted =
                    MySql::insert_completed(&mut tx, &request, RecordId::new(), &self.response)
                        .await?;
                anyhow::ensure!(inserted, "the record's insert met a live record");
                tx.commit().await?;
            }
            Pattern::ClaimFirst => {
                let mut tx = conn.begin_with(BEGIN_CLAIM).await?;
                let claimed = MySql::try_claim(&mut tx, &request).await;
                sqlx::raw_sql(RESTORE).execute(&mut *tx).await?;
                let TryClaim::Claimed(claim) = claimed? else {
                    anyhow::bail!("a fresh key's claim met a record");
                };
                MySql::insert_note(&mut tx, ACTOR, &note).await?;
                MySql::complete(&mut tx, &claim, &self.response).await?;
                tx.commit().await?;
            }
            Pattern::Lease { separate } => {
                let TryClaim::Claimed(claim) = MySql::try_claim(conn, &request).await? else {
                    anyhow::bail!("a fresh key's claim met a record");
                };
                if separate {
                    MySql::insert_note_once(conn, ACTOR, &note).await?;
                    MySql::complete(conn, &claim, &self.response).await?;
                } else {
                    let mut tx = conn.begin_with(BEGIN_WRITE).await?;
                    MySql::insert_note_once(&mut tx, ACTOR, &note).await?;
                    MySql::complete(&mut tx, &claim, &self.response).await?;
                    tx.commit().await?;
                }
            }
        }
        Ok(())
    }
}

fn note(key: &str) -> Note {
    Note {
        id: uuid::Uuid::new_v4().to_string(),
        title: key.to_owned(),
        created_at: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
    }
}

/// The keyed create's statements against the key-less create's, in alternating rounds, on the
/// MySQL database at `url` (its tables made if missing).
pub(crate) async fn statements(
    ctx: &Ctx,
    url: &str,
    pattern: Pattern,
) -> anyhow::Result<(WorkloadReport, Vec<Ratio>)> {
    let options = MySqlStore::connect_options(url)?;
    let store = MySqlStore::from_pool(
        crate::workloads::ceiling::pool_options(1)
            .connect_with(options.clone())
            .await?,
    );
    store.migrate().await?;
    MySql::migrate_notes(store.pool())
        .await
        .context("cannot create the notes table")?;
    store.close().await;
    let mut conns = Vec::with_capacity(ctx.concurrency);
    for _ in 0..ctx.concurrency {
        conns.push(Mutex::new(MySqlConnection::connect_with(&options).await?));
    }
    let conns = Arc::new(conns);
    let body = crate::harness::client::note_body("statements");
    let fingerprint = Fingerprint::builder("POST", "/v1/notes")
        .content_type("application/json")
        .body(&body);
    let side = |keyed, prefix: &str| {
        Arc::new(Statements {
            conns: conns.clone(),
            keyed,
            key_less_lease: matches!(pattern, Pattern::Lease { .. }),
            prefix: format!("{}-{prefix}", ctx.prefix),
            fingerprint,
            response: stored_201(),
        })
    };
    let (keyed, plain) = (side(Some(pattern), "sk"), side(None, "sn"));
    let mut workers = (0..ctx.concurrency)
        .map(|id| Worker::new(id, None))
        .collect();
    let bar = ctx.bar("statements", ctx.rounds);
    let (a, b, status) = dbstatus::pair(ctx, &keyed, &plain, &mut workers, &bar).await;
    bar.finish_and_clear();
    drop((keyed, plain));
    if let Ok(conns) = Arc::try_unwrap(conns) {
        for conn in conns {
            let _ = conn.into_inner().close().await;
        }
    }
    let (a, b) = (
        a[0].summary(pattern.keyed_name()),
        b[0].summary(pattern.plain_name()),
    );
    let ratio = Ratio::info(
        "statements alone: keyed / key-less create (throughput)",
        a.throughput,
        b.throughput,
    );
    let notes = dbstatus::notes(status, &a, &b).await;
    let mut report = WorkloadReport::new("statements", vec![a, b]);
    report.notes = notes;
    Ok((report, vec![ratio]))
}
