//! What a MySQL (MariaDB) server did for each side of a pair: its global status counters
//! (statements, prepared executions, commits, redo log writes, fsyncs) and, when it runs on
//! this machine, its process's CPU time, read before and after every round and reported per
//! request. The counters are the whole server's: another client of the same server counts
//! too, which the load average of the run shows.

use std::sync::Arc;
use std::time::Duration;

use indicatif::ProgressBar;
use sqlx::mysql::MySqlConnection;
use sqlx::{Connection, Row};

use crate::ctx::Ctx;
use crate::harness::runner::{self, Observer, Op, Worker};
use crate::harness::stats::{Samples, SideSummary};

/// The counters read, and how each is named in the report.
const COUNTERS: [(&str, &str); 5] = [
    ("Questions", "statements"),
    ("Com_stmt_execute", "prepared executions"),
    ("Com_commit", "COMMITs"),
    ("Innodb_log_writes", "redo log writes"),
    ("Innodb_data_fsyncs", "fsyncs"),
];

/// The counters at one moment, or summed over rounds, and the server's CPU time.
#[derive(Clone, Copy, Debug, Default)]
struct Counters {
    values: [u64; COUNTERS.len()],
    cpu: Option<Duration>,
}

/// The server's counters for both sides of a pair.
pub(crate) struct DbStatus {
    conn: MySqlConnection,
    /// The server's process id, when it runs on this machine.
    pid: Option<u32>,
    start: Option<Counters>,
    sides: [Counters; 2],
    /// Whether every reading succeeded.
    complete: bool,
}

impl DbStatus {
    /// Connects to the server at `url` for its counters; finds its process from its pid file
    /// when that is readable here.
    pub(crate) async fn connect(url: &str) -> anyhow::Result<Self> {
        let mut conn = MySqlConnection::connect(url).await?;
        let pid_file: Option<String> = sqlx::query_scalar("SELECT @@GLOBAL.pid_file")
            .fetch_one(&mut conn)
            .await
            .ok();
        let pid = pid_file
            .and_then(|path| std::fs::read_to_string(path).ok())
            .and_then(|text| text.trim().parse().ok())
            .filter(|pid| crate::harness::cpu::process(*pid).is_some());
        Ok(Self {
            conn,
            pid,
            start: None,
            sides: [Counters::default(); 2],
            complete: true,
        })
    }

    async fn read(&mut self) -> Option<Counters> {
        let names = COUNTERS.map(|(name, _)| format!("'{name}'")).join(", ");
        let sql = format!("SHOW GLOBAL STATUS WHERE Variable_name IN ({names})");
        let rows = sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .fetch_all(&mut self.conn)
            .await
            .ok()?;
        let mut counters = Counters {
            cpu: self.pid.and_then(crate::harness::cpu::process),
            ..Counters::default()
        };
        for row in rows {
            let name: String = row.try_get(0).ok()?;
            let value: String = row.try_get(1).ok()?;
            if let Some(at) = COUNTERS.iter().position(|(n, _)| *n == name) {
                counters.values[at] = value.parse().ok()?;
            }
        }
        Some(counters)
    }

    /// One line per counter: its value per request of each side, `a` then `b`.
    pub(crate) fn notes(&self, a: &SideSummary, b: &SideSummary) -> Vec<String> {
        if !self.complete {
            return vec!["the MySQL server's counters could not be read".to_owned()];
        }
        let per = |total: f64, side: &SideSummary| total / side.requests.max(1) as f64;
        let mut notes: Vec<String> = COUNTERS
            .iter()
            .enumerate()
            .map(|(at, (_, label))| {
                let (x, y) = (self.sides[0].values[at], self.sides[1].values[at]);
                format!(
                    "MySQL {label} per request: {:.2} / {:.2} ({} / {})",
                    per(x as f64, a),
                    per(y as f64, b),
                    a.name,
                    b.name
                )
            })
            .collect();
        if let (Some(x), Some(y)) = (self.sides[0].cpu, self.sides[1].cpu) {
            notes.push(format!(
                "MySQL server CPU µs per request: {:.0} / {:.0}",
                per(x.as_secs_f64() * 1e6, a),
                per(y.as_secs_f64() * 1e6, b)
            ));
        }
        notes
    }

    /// Closes the connection.
    pub(crate) async fn close(self) {
        let _ = self.conn.close().await;
    }
}

impl Observer for DbStatus {
    async fn before(&mut self, _side: usize) {
        self.start = self.read().await;
    }

    async fn after(&mut self, side: usize) {
        let (Some(start), Some(end)) = (self.start.take(), self.read().await) else {
            self.complete = false;
            return;
        };
        let sum = &mut self.sides[side];
        for (at, value) in sum.values.iter_mut().enumerate() {
            *value += end.values[at].saturating_sub(start.values[at]);
        }
        sum.cpu = match (sum.cpu, start.cpu, end.cpu) {
            (spent, Some(start), Some(end)) => {
                Some(spent.unwrap_or_default() + end.saturating_sub(start))
            }
            _ => None,
        };
    }
}

/// [`runner::pair`] on the run's workers, observing the server when the run's database is
/// MySQL; the server's counters come back with the samples (`None` elsewhere, or when they
/// cannot be read).
pub(crate) async fn pair<A: Op, B: Op>(
    ctx: &Ctx,
    a: &Arc<A>,
    b: &Arc<B>,
    workers: &mut Vec<Worker>,
    bar: &ProgressBar,
) -> (Vec<Samples>, Vec<Samples>, Option<DbStatus>) {
    let url = ctx.database_url.as_deref();
    let mut status = match url.filter(|url| idemkey_server::is_mysql(url)) {
        Some(url) => DbStatus::connect(url).await.ok(),
        None => None,
    };
    let split = (ctx.budget, ctx.rounds);
    let (x, y) = match &mut status {
        Some(status) => runner::pair_observed(a, b, workers, split, bar, status).await,
        None => runner::pair_observed(a, b, workers, split, bar, &mut ()).await,
    };
    (x, y, status)
}

/// The server's notes for a workload's two sides, closing its connection.
pub(crate) async fn notes(
    status: Option<DbStatus>,
    a: &SideSummary,
    b: &SideSummary,
) -> Vec<String> {
    let Some(status) = status else {
        return Vec::new();
    };
    let notes = status.notes(a, b);
    status.close().await;
    notes
}
