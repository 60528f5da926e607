//! The power-loss campaigns: the crash campaign (retrying clients, `idemkey serve` SIGKILLed
//! at random moments) with the SQLite database on a [`PowerLossFs`], whose power is cut after
//! each kill, once the killed process is reaped: every byte and directory entry that no
//! `fsync` covered is gone before the server starts again. A SIGKILL alone keeps the kernel's
//! page cache; a cut does not, so these campaigns test the syncs themselves (`synchronous =
//! FULL`, the SQLite store's group commit of claims and its directory syncs).
//!
//! Afterwards, as in the crash campaign: every answer a client was given is in the database
//! and replays identically, no key executed twice (one note per key), one completed record
//! per key. And the same campaign on a disk whose syncs lie
//! ([`PowerLossFs::set_syncs_lie`]) must find acknowledged answers lost: the checks can fail.
//!
//! Atomic mode, and lease mode with its default completion (in the note's transaction) and
//! `--separate-completion`. The schedule comes from a seed, printed first;
//! `IDEMKEY_POWERLOSS_SEED` replays it. Sizes: `IDEMKEY_POWERLOSS_CLIENTS` (default 4),
//! `IDEMKEY_POWERLOSS_KEYS` per client (60), `IDEMKEY_POWERLOSS_CUTS` (12, one per kill; a
//! kill during a startup, one in five, gets its cut too), `IDEMKEY_POWERLOSS_MAX_DELAY_MS`
//! (10), `IDEMKEY_POWERLOSS_LEASE` (1s). Mounting needs root and `/dev/fuse`
//! (`needs = [fuse]`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use idemkey_powerloss::PowerLossFs;
use idemkey_test_support::db::Db;
use idemkey_test_support::serve::ServeSpec;

use crate::IDEMKEY;
use crate::campaign::{self, Findings, Plan};

/// At least this many cuts, or the campaign proves too little.
const MIN_CUTS: u64 = 10;

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [fuse])]
async fn powerloss_campaign_sqlite_atomic() {
    let (findings, stats) = run("atomic", &[], false).await;
    assert!(findings.is_empty(), "{findings:#?}");
    assert_cuts(&stats);
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [fuse])]
async fn powerloss_campaign_sqlite_lease() {
    let (findings, stats) = run("lease", &[], false).await;
    assert!(findings.is_empty(), "{findings:#?}");
    assert_cuts(&stats);
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [fuse])]
async fn powerloss_campaign_sqlite_lease_separate_completion() {
    let (findings, stats) = run("lease", &["--separate-completion"], false).await;
    assert!(findings.is_empty(), "{findings:#?}");
    assert_cuts(&stats);
}

/// The campaign on a disk whose syncs lie: its verification must report acknowledged answers
/// lost, or it could not have seen a real loss either.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [fuse])]
async fn powerloss_campaign_finds_losses_on_lying_syncs() {
    let (findings, stats) = run("atomic", &[], true).await;
    assert!(
        !findings.lost.is_empty(),
        "no acknowledged answer lost though no sync was real: {findings:#?}"
    );
    assert!(!findings.not_replayed.is_empty(), "{findings:#?}");
    assert_cuts(&stats);
}

fn assert_cuts(stats: &BTreeMap<String, u64>) {
    let cuts = stats.get("cut: power").copied().unwrap_or(0);
    assert!(
        cuts >= MIN_CUTS,
        "only {cuts} cuts (at least {MIN_CUTS}) before the clients were done: raise IDEMKEY_POWERLOSS_KEYS"
    );
}

/// Runs one campaign on a fresh mount; `lie`: its syncs lie from the first cut on (the schema
/// is made durable before). Returns what the verification found and the stats.
async fn run(mode: &str, extra: &[&str], lie: bool) -> (Findings, BTreeMap<String, u64>) {
    let plan = Plan::powerloss_from_env();
    let logs = tempfile::tempdir().unwrap();
    let mount = tempfile::tempdir().unwrap();
    let fs = Arc::new(PowerLossFs::mount(mount.path()).unwrap());
    let db = Db::Sqlite(fs.path().join("notes.db"));
    let mut words = vec!["sqlite", mode];
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
    let first = fs.cut().unwrap();
    assert_eq!(
        db.count("notes").await,
        0,
        "{name}: the schema survived a cut"
    );
    fs.set_syncs_lie(lie);
    let started = Instant::now();
    let (server, receipts, shared) = campaign::drive(&spec, &plan, Some(fs.clone())).await;
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
    let findings = campaign::verify(&db, &server, &receipts, &name).await;
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
        if findings.is_empty() {
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
    drop(server);
    (findings, stats)
}
