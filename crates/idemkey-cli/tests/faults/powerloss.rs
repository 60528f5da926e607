//! The power-loss campaigns: the crash campaign (retrying clients, `idemkey serve` SIGKILLed
//! at random moments) with the database's files on a [`PowerLossFs`], whose power is cut
//! after each kill, once the killed process is reaped: every byte and directory entry that no
//! `fsync` covered is gone before the server starts again. A SIGKILL alone keeps the kernel's
//! page cache; a cut does not, so these campaigns test the syncs themselves.
//!
//! Two databases. A SQLite file (`synchronous = FULL`, the SQLite store's group commit of
//! claims and its directory syncs). And a private PostgreSQL (`initdb` on the filesystem, run
//! with its defaults: `fsync`, `synchronous_commit` and `full_page_writes` on): a cut there
//! stops the whole machine, so every process of the cluster is SIGKILLed with the server
//! (no shutdown, no checkpoint), the power cut, and PostgreSQL started again, through its
//! crash recovery, before the server is.
//!
//! Afterwards, as in the crash campaign: every answer a client was given is in the database
//! and replays identically, no key executed twice (one note per key), one completed record
//! per key. And the same campaign on a disk whose syncs lie
//! ([`PowerLossFs::set_syncs_lie`]) must find acknowledged answers lost: the checks can fail
//! (on PostgreSQL a cluster that does not start again after a cut counts as found too).
//!
//! Atomic mode, and lease mode with its default completion (in the note's transaction) and
//! with `--separate-completion`. The schedule comes from a seed, printed first;
//! `IDEMKEY_POWERLOSS_SEED` replays it. Sizes: `IDEMKEY_POWERLOSS_CLIENTS` (default 4),
//! `IDEMKEY_POWERLOSS_KEYS` per client (60), `IDEMKEY_POWERLOSS_CUTS` (12, one per kill; a
//! kill during a startup, one in five, gets its cut too), `IDEMKEY_POWERLOSS_MAX_DELAY_MS`
//! (10), `IDEMKEY_POWERLOSS_LEASE` (1s). Mounting needs root and `/dev/fuse`
//! (`needs = [fuse]`); PostgreSQL, its server binaries and the `postgres` user
//! (`pg_server`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use idemkey_powerloss::{Cut, PowerLossFs};
use idemkey_test_support::db::Db;
use idemkey_test_support::db::pg::Schema;
use idemkey_test_support::process::pg_server::Cluster;
use idemkey_test_support::process::serve::ServeSpec;

use crate::IDEMKEY;
use crate::campaign::{self, Findings, Plan, Power};

/// At least this many cuts, or the campaign proves too little.
const MIN_CUTS: u64 = 10;

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [fuse])]
async fn powerloss_campaign_sqlite_atomic() {
    passes(&run(Store::Sqlite, "atomic", &[], false).await);
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [fuse])]
async fn powerloss_campaign_sqlite_lease() {
    passes(&run(Store::Sqlite, "lease", &[], false).await);
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [fuse])]
async fn powerloss_campaign_sqlite_lease_separate_completion() {
    passes(&run(Store::Sqlite, "lease", &["--separate-completion"], false).await);
}

/// The campaign on a disk whose syncs lie: its verification must report acknowledged answers
/// lost, or it could not have seen a real loss either.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [fuse])]
async fn powerloss_campaign_finds_losses_on_lying_syncs() {
    let outcome = run(Store::Sqlite, "atomic", &[], true).await;
    assert_eq!(outcome.down, None, "SQLite opens whatever a cut left");
    finds_losses(&outcome);
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [fuse, pg_server])]
async fn powerloss_campaign_postgres_atomic() {
    passes(&run(Store::Postgres, "atomic", &[], false).await);
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [fuse, pg_server])]
async fn powerloss_campaign_postgres_lease() {
    passes(&run(Store::Postgres, "lease", &[], false).await);
}

/// Lease mode completing on its own: the claim commits asynchronously and is flushed by the
/// note's id taken from `Keys` (the first `Keys::get`), the note and the completion each by
/// its own commit.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [fuse, pg_server])]
async fn powerloss_campaign_postgres_lease_separate_completion() {
    passes(&run(Store::Postgres, "lease", &["--separate-completion"], false).await);
}

/// The PostgreSQL campaign on a disk whose syncs lie: acknowledged answers must be found
/// lost, or the cluster must fail to start again after a cut (it found its files damaged).
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [fuse, pg_server])]
async fn powerloss_campaign_postgres_finds_losses_on_lying_syncs() {
    let outcome = run(Store::Postgres, "atomic", &[], true).await;
    if outcome.down.is_none() {
        finds_losses(&outcome);
    }
}

/// Nothing found, the database came back after every cut, and there were enough cuts.
fn passes(outcome: &Outcome) {
    assert_eq!(outcome.down, None, "the database came back after every cut");
    assert!(outcome.findings.is_empty(), "{:#?}", outcome.findings);
    assert_cuts(&outcome.stats);
}

/// Acknowledged answers lost and not replayed, after enough cuts.
fn finds_losses(outcome: &Outcome) {
    let findings = &outcome.findings;
    assert!(
        !findings.lost.is_empty(),
        "no acknowledged answer lost though no sync was real: {findings:#?}"
    );
    assert!(!findings.not_replayed.is_empty(), "{findings:#?}");
    assert_cuts(&outcome.stats);
}

fn assert_cuts(stats: &BTreeMap<String, u64>) {
    let cuts = stats.get("cut: power").copied().unwrap_or(0);
    assert!(
        cuts >= MIN_CUTS,
        "only {cuts} cuts (at least {MIN_CUTS}) before the clients were done: raise IDEMKEY_POWERLOSS_KEYS"
    );
}

/// The database a campaign runs on, its files on the power-loss filesystem.
#[derive(Clone, Copy, Debug)]
enum Store {
    /// A SQLite file: a cut is the filesystem's alone.
    Sqlite,
    /// A private PostgreSQL whose data directory is on the filesystem ([`PostgresPower`]).
    Postgres,
}

/// A private PostgreSQL on the power-loss filesystem: a cut stops the cluster as it stops the
/// disk, every process of it SIGKILLed first, and starts it again after (crash recovery).
struct PostgresPower {
    cluster: Cluster,
    fs: Arc<PowerLossFs>,
}

impl Power for PostgresPower {
    fn cut(&self) -> Result<Cut, String> {
        self.cluster.kill9();
        let cut = self.fs.cut().unwrap();
        if self.cluster.try_start_again() {
            Ok(cut)
        } else {
            Err(self.cluster.log_tail())
        }
    }
}

/// What one campaign came to.
struct Outcome {
    /// What the verification found; nothing verified if `down`.
    findings: Findings,
    stats: BTreeMap<String, u64>,
    /// Why the database or the server did not come back after a cut, if it did not.
    down: Option<String>,
}

/// Runs one campaign on a fresh mount; `lie`: its syncs lie from the first cut on (the schema
/// is made durable before).
async fn run(store: Store, mode: &str, extra: &[&str], lie: bool) -> Outcome {
    let plan = Plan::powerloss_from_env();
    let logs = tempfile::tempdir().unwrap();
    let mount = tempfile::tempdir().unwrap();
    let fs = Arc::new(PowerLossFs::mount(mount.path()).unwrap());
    // Declared after the mount: the cluster is stopped before the filesystem goes.
    let (power, db): (Arc<dyn Power>, Db) = match store {
        Store::Sqlite => (fs.clone(), Db::Sqlite(fs.path().join("notes.db"))),
        Store::Postgres => {
            let path = fs.path().to_owned();
            let cluster = tokio::task::spawn_blocking(move || Cluster::start_in(&path))
                .await
                .unwrap();
            let db = Db::Postgres(Schema::create(&cluster.url()).await);
            let fs = fs.clone();
            (Arc::new(PostgresPower { cluster, fs }), db)
        }
    };
    let mut words = vec![
        match store {
            Store::Sqlite => "sqlite",
            Store::Postgres => "postgres",
        },
        mode,
    ];
    words.extend_from_slice(extra);
    if lie {
        words.push("(syncs lie)");
    }
    let name = words.join(" ");
    eprintln!(
        "power-loss campaign {name}: seed={} clients={} keys={} cuts={} (replay with IDEMKEY_POWERLOSS_SEED={})",
        plan.seed, plan.clients, plan.keys, plan.kills, plan.seed
    );
    // Default flags only: exactly-once in lease mode must not depend on `--secret`.
    let mut args = vec!["--mode", mode, "--lease", &plan.lease];
    args.extend_from_slice(extra);
    let spec = ServeSpec::new(IDEMKEY, db.url(), &args).logged_in(logs.path());
    // A first server creates the schema; a cut after it shows the schema itself is durable.
    spec.start().kill9();
    let cut = power.clone();
    let first = tokio::task::spawn_blocking(move || cut.cut())
        .await
        .unwrap()
        .unwrap_or_else(|why| panic!("{name}: the database did not start after a cut: {why}"));
    assert_eq!(
        db.count("notes").await,
        0,
        "{name}: the schema survived a cut"
    );
    fs.set_syncs_lie(lie);
    let started = Instant::now();
    let (server, receipts, shared) = campaign::drive(&spec, &plan, Some(power.clone())).await;
    let elapsed = started.elapsed();
    let violations = shared.violations.lock().unwrap().clone();
    if !lie {
        assert!(
            violations.is_empty(),
            "{name} seed={}: {violations:#?}\n{}",
            plan.seed,
            spec.log_tail()
        );
    }
    let down = shared.down.lock().unwrap().clone();
    let findings = match &server {
        Some(server) => campaign::verify(&db, server, &receipts, &name).await,
        None => Findings::default(),
    };
    let stats = shared.stats.lock().unwrap().clone();
    let requests: u64 = stats
        .iter()
        .filter(|(what, _)| {
            !["kill:", "cut:", "restart:"]
                .iter()
                .any(|p| what.starts_with(p))
        })
        .map(|(_, n)| n)
        .sum();
    println!(
        "power-loss campaign {name}: {} seed={} keys={} in {:.1}s: cuts={} bytes dropped={} entries dropped={} requests={} duplicates={} lost={} not replayed={} stray notes={} record findings={} (schema cut: {} bytes, {} entries) {stats:?}",
        if down.is_some() {
            "DID NOT COME BACK"
        } else if findings.is_empty() {
            "PASSED"
        } else {
            "FOUND"
        },
        plan.seed,
        receipts.len(),
        elapsed.as_secs_f64(),
        stats.get("cut: power").copied().unwrap_or(0),
        stats.get("cut: bytes dropped").copied().unwrap_or(0),
        stats.get("cut: entries dropped").copied().unwrap_or(0),
        requests,
        findings.duplicates.len(),
        findings.lost.len(),
        findings.not_replayed.len(),
        findings.stray_notes,
        findings.records.len(),
        first.bytes,
        first.entries,
    );
    if let Some(first) = findings.lost.first() {
        eprintln!("{name} seed={}: first lost: {first}", plan.seed);
    }
    if let Some(why) = &down {
        eprintln!("{name} seed={}: {why}", plan.seed);
    }
    drop(server);
    Outcome {
        findings,
        stats,
        down,
    }
}
