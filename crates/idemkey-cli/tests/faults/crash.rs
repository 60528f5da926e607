//! The crash campaign: retrying clients create notes, each under its own key, resending on
//! any error or timeout, while `idemkey serve` is killed with SIGKILL at random moments and
//! restarted on the same database. Afterwards every key maps to exactly one note, every id a
//! client received exists, and one more retry of every key replays the same id.
//!
//! SQLite, PostgreSQL (`IDEMKEY_TEST_PG_URL`, a fresh schema per run) and MySQL/MariaDB
//! (`IDEMKEY_TEST_MYSQL_URL`, a fresh database per run), atomic and lease mode (with a 1 s
//! lease, so a dead executor's claim blocks its retries only briefly), each strategy and lease
//! completion the service offers (on MySQL: both strategies and lease mode with the service's
//! defaults), and lease mode with the records in a `redis-server` of the test's own
//! (`--records-url`). The notes service on actix-web (`idemkey-actix-notes`, the same command
//! line) runs the same campaigns on SQLite and PostgreSQL, in both modes.
//!
//! The run's schedule comes from a seed, printed first; `IDEMKEY_CRASH_SEED` replays it.
//! Bigger runs: `IDEMKEY_CRASH_CLIENTS` (default 4), `IDEMKEY_CRASH_KEYS` per client (100),
//! `IDEMKEY_CRASH_KILLS` (30), `IDEMKEY_CRASH_MAX_DELAY_MS` (10), `IDEMKEY_CRASH_LEASE` (1s).
//! Kill `i` waits for a random number of keys (below keys / (kills + 1)) to complete after
//! restart `i - 1`, then a random delay; one kill in five also kills the next process during
//! its startup. Only the injected schedule is reproducible: the interleaving of real
//! processes is not.

use std::path::{Path, PathBuf};
use std::time::Instant;

use idemkey_test_support::db::{Backend, Db};
use idemkey_test_support::process::binary;
use idemkey_test_support::process::redis::RedisServer;
use idemkey_test_support::process::serve::ServeSpec;

use crate::IDEMKEY;
use crate::campaign::{self, Plan};

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_campaign_sqlite_atomic() {
    run(Backend::Sqlite, "atomic", &[]).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_campaign_sqlite_atomic_claim_first() {
    run(Backend::Sqlite, "atomic", &["--strategy", "claim-first"]).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_campaign_sqlite_atomic_no_lookup() {
    run(Backend::Sqlite, "atomic", &["--no-lookup"]).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_campaign_sqlite_lease() {
    run(Backend::Sqlite, "lease", &[]).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_campaign_sqlite_lease_separate_completion() {
    run(Backend::Sqlite, "lease", &["--separate-completion"]).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn crash_campaign_postgres_atomic() {
    run(Backend::Postgres, "atomic", &[]).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn crash_campaign_postgres_atomic_claim_first() {
    run(Backend::Postgres, "atomic", &["--strategy", "claim-first"]).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn crash_campaign_postgres_atomic_no_lookup() {
    run(Backend::Postgres, "atomic", &["--no-lookup"]).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn crash_campaign_postgres_lease() {
    run(Backend::Postgres, "lease", &[]).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn crash_campaign_postgres_lease_separate_completion() {
    run(Backend::Postgres, "lease", &["--separate-completion"]).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [mysql])]
async fn crash_campaign_mysql_atomic() {
    run(Backend::Mysql, "atomic", &[]).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [mysql])]
async fn crash_campaign_mysql_atomic_claim_first() {
    run(Backend::Mysql, "atomic", &["--strategy", "claim-first"]).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [mysql])]
async fn crash_campaign_mysql_lease() {
    run(Backend::Mysql, "lease", &[]).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis_server])]
async fn crash_campaign_sqlite_lease_redis_records() {
    run_on_redis(Backend::Sqlite).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis_server, postgres])]
async fn crash_campaign_postgres_lease_redis_records() {
    run_on_redis(Backend::Postgres).await;
}

/// Lease mode with the records in a Redis of the test's own, which outlives every kill.
async fn run_on_redis(backend: Backend) {
    let redis = RedisServer::start(&["--appendonly", "yes", "--appendfsync", "always"]);
    let url = redis.url();
    run(backend, "lease", &["--records-url", &url]).await;
}

// The same campaign against the notes service on actix-web (`idemkey-actix-notes`), the
// idemkey-actix middleware's front end, in both modes.

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_campaign_actix_sqlite_atomic() {
    run_program(&actix_notes(), Backend::Sqlite, "atomic", &[]).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_campaign_actix_sqlite_lease() {
    run_program(&actix_notes(), Backend::Sqlite, "lease", &[]).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn crash_campaign_actix_postgres_atomic() {
    run_program(&actix_notes(), Backend::Postgres, "atomic", &[]).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn crash_campaign_actix_postgres_lease() {
    run_program(&actix_notes(), Backend::Postgres, "lease", &[]).await;
}

fn actix_notes() -> PathBuf {
    binary::beside_test("idemkey-actix-notes", "idemkey-actix-notes")
}

/// `extra`: flags beyond the mode and lease (atomic mode's strategy: commit-time unless
/// `--strategy claim-first`, with its lookup unless `--no-lookup`; lease mode's completion
/// in the note's transaction unless `--separate-completion`; `--records-url`).
async fn run(backend: Backend, mode: &str, extra: &[&str]) {
    run_program(Path::new(IDEMKEY), backend, mode, extra).await;
}

/// [`run`] against `program`, a service with `idemkey serve`'s command line.
async fn run_program(program: &Path, backend: Backend, mode: &str, extra: &[&str]) {
    let plan = Plan::from_env();
    let dir = tempfile::tempdir().unwrap();
    let db = Db::create(backend, dir.path()).await;
    let front = program.file_name().unwrap_or_default().to_string_lossy();
    let name = format!("{front} {backend:?} {mode} {}", extra.join(" "));
    eprintln!(
        "crash campaign {name}: seed={} clients={} keys={} kills={} (replay with IDEMKEY_CRASH_SEED={})",
        plan.seed, plan.clients, plan.keys, plan.kills, plan.seed
    );
    // Default flags only: exactly-once in lease mode must not depend on `--secret`.
    let mut args = vec!["--mode", mode, "--lease", &plan.lease];
    args.extend_from_slice(extra);
    let spec = ServeSpec::new(program, db.url(), &args).logged_in(dir.path());
    let started = Instant::now();
    let (server, receipts, shared) = campaign::drive(&spec, &plan, None).await;
    let server = server.expect("no power cut: the server always starts again");
    let elapsed = started.elapsed();
    let violations = shared.violations.lock().unwrap().clone();
    assert!(
        violations.is_empty(),
        "{name} seed={}: {violations:#?}\n{}",
        plan.seed,
        spec.log_tail()
    );
    let findings = campaign::verify(&db, &server, &receipts, &name).await;
    assert!(
        findings.is_empty(),
        "{name} seed={}: {findings:#?}",
        plan.seed
    );
    let stats = shared.stats.lock().unwrap().clone();
    let kills = stats.get("kill: SIGKILL").copied().unwrap_or(0);
    assert!(
        kills as usize * 2 >= plan.kills,
        "{name}: only {kills} of {} kills happened before the clients were done: raise IDEMKEY_CRASH_KEYS",
        plan.kills
    );
    println!(
        "crash campaign {name}: PASSED seed={} keys={} in {:.1}s {stats:?}",
        plan.seed,
        receipts.len(),
        elapsed.as_secs_f64()
    );
    drop(server);
}
