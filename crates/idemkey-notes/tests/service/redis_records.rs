//! `idemkey serve --mode lease --records-url redis://...` (behaviour §13): records in
//! Redis, notes in the database. Each test runs a `redis-server` of its own (persistence on:
//! `appendfsync always`), so runs never meet. A storm of 64 across three instances makes one
//! note; Redis SIGKILLed and restarted mid-load loses no acknowledged note and duplicates none,
//! and the same `idemkey serve` processes reconnect; atomic mode refuses `--records-url`;
//! `forget` and `sweep` take it too.

use std::net::SocketAddr;
use std::path::Path;

use idemkey_test_support::db::{count_rows, notes_by_title};
use idemkey_test_support::net::load::{self, Receipts};
use idemkey_test_support::net::storm::{raw_create, storm};
use idemkey_test_support::process::binary;
use idemkey_test_support::process::notes::{ALICE, create};
use idemkey_test_support::process::redis::{Certificates, RedisServer, tls_server};
use idemkey_test_support::process::serve::Serve;
use idemkey_test_support::runner::needs::valkey_program;

use crate::idemkey;

/// Persistence that loses nothing acknowledged: every write fsynced before its reply.
const DURABLE: [&str; 4] = ["--appendonly", "yes", "--appendfsync", "always"];

fn lease_on(db: &Path, redis: &RedisServer, extra: &[&str]) -> Serve {
    let url = redis.url();
    let mut args = vec!["--mode", "lease", "--records-url", url.as_str()];
    args.extend_from_slice(extra);
    Serve::sqlite(binary::idemkey(), db, &args)
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis_server])]
async fn a_storm_of_64_across_three_instances_sharing_redis_makes_one_note() {
    let redis = RedisServer::start(&DURABLE);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("notes.db");
    let servers: Vec<Serve> = (0..3).map(|_| lease_on(&db, &redis, &[])).collect();
    let targets: Vec<SocketAddr> = (0..64).map(|i| servers[i % 3].addr).collect();
    let body = "{\"title\":\"storm\"}";
    let answers = storm(&targets, |addr| raw_create(addr, ALICE, "storm-64", body)).await;
    assert_eq!(count_rows(&db, "notes").await, 1);
    // The records are in Redis, not in the database.
    assert_eq!(count_rows(&db, "idemkey_records").await, 0);
    let created: Vec<_> = answers.iter().filter(|a| a.status == 201).collect();
    assert!(!created.is_empty(), "{answers:?}");
    assert!(created.iter().all(|a| a.body == created[0].body));
    assert!(
        answers.iter().all(|a| a.status == 201 || a.status == 409),
        "{answers:?}"
    );
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis_server])]
async fn redis_killed_and_restarted_mid_load_loses_nothing_and_duplicates_nothing() {
    let mut redis = RedisServer::start(&DURABLE);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("notes.db");
    // A claim whose release or completion failed while Redis was down holds its key until
    // its lease ends: a short lease keeps the test short.
    let servers: Vec<Serve> = (0..2)
        .map(|_| lease_on(&db, &redis, &["--lease", "2s"]))
        .collect();
    let bases: Vec<String> = servers.iter().map(|s| s.url("")).collect();
    let receipts = Receipts::default();
    // 503 while Redis is down, 409 while a dead claim's lease runs, 500 for a lost reply.
    let running = tokio::spawn(load::run(bases, 6, 100, &[409, 500, 503], receipts.clone()));
    receipts.wait_for(80).await;
    redis.kill();
    // Down until the clients have met the outage six times (520 keys are still to go),
    // then back.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while receipts.setbacks() < 6 {
        assert!(
            std::time::Instant::now() < deadline,
            "no request met the outage"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    redis.restart();
    running.await.unwrap();
    let ids = receipts.snapshot();
    let notes = notes_by_title(&db).await;
    assert_eq!(ids.len(), 600);
    for (key, id) in &ids {
        assert_eq!(
            notes.get(key),
            Some(&vec![id.clone()]),
            "{key}: one note, the one acknowledged"
        );
    }
    assert_eq!(notes.len(), 600, "no other notes");
    eprintln!(
        "600 keys, {} answers retried across the Redis restart",
        receipts.setbacks()
    );
}

#[idemkey_test_support::test]
fn atomic_mode_refuses_records_url() {
    for extra in [
        &["--mode", "atomic"][..],
        &["--mode", "lease", "--replay-cache", "1s"],
        &["--mode", "lease", "--max-records-per-actor", "5"],
    ] {
        let mut args = vec!["serve", "--records-url", "redis://127.0.0.1:1"];
        args.extend_from_slice(extra);
        let output = idemkey(&args);
        assert_eq!(output.status.code(), Some(2), "{extra:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains("--records-url") || stderr.contains("records"),
            "{stderr}"
        );
    }
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis_server])]
async fn forget_and_sweep_take_records_url() {
    let redis = RedisServer::start(&DURABLE);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("notes.db");
    let server = lease_on(&db, &redis, &[]);
    let client = reqwest::Client::new();
    let post = || create(&client, &server, ALICE, Some(b"k"), "{\"title\":\"f\"}").send();
    let first: serde_json::Value = post().await.unwrap().json().await.unwrap();
    let url = redis.url();
    let db_url = format!("sqlite://{}", db.display());
    let with_records = |extra: &[&str]| {
        let mut args = extra.to_vec();
        args.extend([
            "--database-url",
            db_url.as_str(),
            "--records-url",
            url.as_str(),
        ]);
        idemkey(&args)
    };
    let wrong_version = with_records(&[
        "forget",
        "--actor",
        "alice",
        "--operation",
        "create-note:v9",
        "--key",
        "k",
    ]);
    assert_eq!(wrong_version.status.code(), Some(1));
    let forgot = with_records(&[
        "forget",
        "--actor",
        "alice",
        "--operation",
        "create-note:v1",
        "--key",
        "k",
    ]);
    assert!(forgot.status.success(), "{forgot:?}");
    // Forgotten: the key executes again, as a new record with a new note.
    let second: serde_json::Value = post().await.unwrap().json().await.unwrap();
    assert_ne!(first["id"], second["id"]);
    let swept = with_records(&["sweep"]);
    assert!(swept.status.success());
    assert!(String::from_utf8_lossy(&swept.stdout).contains("nothing to sweep"));
    let unreachable = idemkey(&["sweep", "--records-url", "redis://127.0.0.1:1"]);
    assert_eq!(unreachable.status.code(), Some(1));
    // One line, each cause once (the stores' messages quote their sources).
    let stderr = String::from_utf8_lossy(&unreachable.stderr);
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert_eq!(stderr.matches("refused").count(), 1, "{stderr}");
}

/// `--records-wait-replicas 1`: a stored response is answered once the replica has it, so
/// the replica holds the record as soon as the client has its 201.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis_server])]
async fn records_wait_for_a_replica_when_asked() {
    let master = RedisServer::start(&["--repl-diskless-sync-delay", "0"]);
    let port = master.port.to_string();
    let replica = RedisServer::start(&["--replicaof", "127.0.0.1", &port]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !replica
        .cli(&["INFO", "replication"])
        .contains("master_link_status:up")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the replica never came up"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let dir = tempfile::tempdir().unwrap();
    let server = lease_on(
        &dir.path().join("notes.db"),
        &master,
        &["--records-wait-replicas", "1"],
    );
    let client = reqwest::Client::new();
    for i in 0..5 {
        let key = format!("w{i}");
        let created = create(
            &client,
            &server,
            ALICE,
            Some(key.as_bytes()),
            "{\"title\":\"w\"}",
        )
        .send()
        .await
        .unwrap();
        assert_eq!(created.status(), 201);
        // Every record key the replica has; the one just answered among them.
        let keys = replica.cli(&["--scan", "--pattern", "idemkey:{*"]);
        assert_eq!(keys.lines().count(), i + 1, "{keys}");
    }
    let cluster = idemkey(&[
        "serve",
        "--mode",
        "lease",
        "--records-wait-replicas",
        "1",
        "--records-url",
        "redis+cluster://127.0.0.1:1,127.0.0.1:2",
    ]);
    assert_eq!(cluster.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&cluster.stderr).contains("standalone"));
}

/// `--records-wait-fsync` (Valkey 8, Redis 7.2+): each claim is executed, and each stored
/// response answered, after the server's `WAITAOF` for it; a server without an append-only
/// file is refused at start-up.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [valkey])]
async fn records_wait_for_the_fsync_when_asked() {
    let program = valkey_program();
    let valkey = RedisServer::start_program(
        &program,
        &["--appendonly", "yes", "--appendfsync", "everysec"],
    );
    let waits = || usize::try_from(valkey.calls("waitaof")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let server = lease_on(
        &dir.path().join("notes.db"),
        &valkey,
        &["--records-wait-fsync"],
    );
    let client = reqwest::Client::new();
    let probes = waits();
    for i in 0..3 {
        let key = format!("f{i}");
        let post = || {
            create(
                &client,
                &server,
                ALICE,
                Some(key.as_bytes()),
                "{\"title\":\"f\"}",
            )
            .send()
        };
        assert_eq!(post().await.unwrap().status(), 201);
        assert_eq!(
            waits(),
            probes + 2 * i + 2,
            "the claim's wait and the completion's"
        );
        let replayed = post().await.unwrap();
        assert_eq!(replayed.headers()["idempotent-replayed"], "true");
        assert_eq!(waits(), probes + 2 * i + 2, "a replay stores nothing");
    }

    let no_aof = RedisServer::start_program(&program, &["--appendonly", "no"]);
    let url = no_aof.url();
    let refused = idemkey(&[
        "serve",
        "--mode",
        "lease",
        "--listen",
        "127.0.0.1:0",
        "--database-url",
        &format!("sqlite://{}", dir.path().join("other.db").display()),
        "--records-url",
        &url,
        "--records-wait-fsync",
    ]);
    assert_eq!(refused.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("appendonly"), "{stderr}");
}

/// Serves without an owner heartbeat.
const NO_HEARTBEAT: [&str; 2] = ["--owner-grace", "off"];

/// Replays are answered from `idemkey serve`'s memory once cached (no script runs in Redis),
/// and `idemkey forget`, another process, reaches that memory through Redis's invalidation:
/// the next request executes again. `--no-replay-cache` sends every replay to Redis.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis_server])]
async fn replays_come_from_memory_until_a_forget_elsewhere() {
    let redis = RedisServer::start(&DURABLE);
    let scripts = || redis.calls("evalsha");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("notes.db");
    // No owners' heartbeats: each is a script too, and would count among the replays'.
    let server = lease_on(&db, &redis, &NO_HEARTBEAT);
    let client = reqwest::Client::new();
    let post = || create(&client, &server, ALICE, Some(b"m"), "{\"title\":\"m\"}").send();
    let first: serde_json::Value = post().await.unwrap().json().await.unwrap();
    // The first replay asks Redis and fills the cache in the background.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let before = scripts();
        let replay = post().await.unwrap();
        assert_eq!(replay.headers()["idempotent-replayed"], "true");
        if scripts() == before {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "replays never came from memory"
        );
    }
    let before = scripts();
    for _ in 0..20 {
        let replay: serde_json::Value = post().await.unwrap().json().await.unwrap();
        assert_eq!(replay["id"], first["id"]);
    }
    assert_eq!(scripts(), before);

    let db_url = format!("sqlite://{}", db.display());
    let forgot = idemkey(&[
        "forget",
        "--database-url",
        &db_url,
        "--records-url",
        &redis.url(),
        "--actor",
        "alice",
        "--operation",
        "create-note:v1",
        "--key",
        "m",
    ]);
    assert!(forgot.status.success(), "{forgot:?}");
    // The invalidation is on its way for microseconds after the forget (behaviour §7): a
    // request in that window may still be answered from the copy (seen once under a loaded
    // CI machine); the next ones execute.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let again = loop {
        let again = post().await.unwrap();
        if again.headers().get("idempotent-replayed").is_none() {
            break again;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the forget never reached the cache"
        );
    };
    let again: serde_json::Value = again.json().await.unwrap();
    assert_ne!(again["id"], first["id"]);

    let no_cache = ["--no-replay-cache", NO_HEARTBEAT[0], NO_HEARTBEAT[1]];
    let uncached = lease_on(&dir.path().join("other.db"), &redis, &no_cache);
    let post = || create(&client, &uncached, ALICE, Some(b"u"), "{\"title\":\"u\"}").send();
    assert_eq!(post().await.unwrap().status(), 201);
    let before = scripts();
    for _ in 0..5 {
        assert_eq!(
            post().await.unwrap().headers()["idempotent-replayed"],
            "true"
        );
    }
    assert_eq!(scripts(), before + 5);
}

/// `--records-url rediss://` with `--records-tls-ca`: records over TLS, the server's
/// certificate checked against that CA; without it the server is refused at start-up, and
/// `forget` takes the CA too.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_over_tls_trust_the_ca_given() {
    let certs = Certificates::make();
    let (_redis, url) = tls_server(&certs);
    let ca = certs.path("ca.crt");
    let ca = ca.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("notes.db");
    let args = [
        "--mode",
        "lease",
        "--records-url",
        &url,
        "--records-tls-ca",
        ca,
    ];
    let server = Serve::sqlite(binary::idemkey(), &db, &args);
    let client = reqwest::Client::new();
    let post = || create(&client, &server, ALICE, Some(b"t"), "{\"title\":\"t\"}").send();
    assert_eq!(post().await.unwrap().status(), 201);
    assert_eq!(
        post().await.unwrap().headers()["idempotent-replayed"],
        "true"
    );
    let db_url = format!("sqlite://{}", db.display());
    let forget = |extra: &[&str]| {
        let mut args = vec!["forget", "--database-url", &db_url, "--records-url", &url];
        args.extend_from_slice(extra);
        args.extend([
            "--actor",
            "alice",
            "--operation",
            "create-note",
            "--key",
            "t",
        ]);
        idemkey(&args)
    };
    let untrusted = forget(&[]);
    assert_eq!(untrusted.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&untrusted.stderr);
    assert!(stderr.contains("invalid peer certificate"), "{stderr}");
    let missing = forget(&["--records-tls-ca", "/nonexistent/ca.pem"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("--records-tls-ca"));
    assert!(forget(&["--records-tls-ca", ca]).status.success());
}

/// A server on which the cache cannot track keys (`CLIENT` renamed away) still serves the
/// records: `idemkey serve` starts without the cache, with a warning, and every replay asks Redis.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis_server])]
async fn a_server_that_cannot_track_keys_serves_uncached() {
    let redis = RedisServer::start(&["--rename-command", "CLIENT", ""]);
    let dir = tempfile::tempdir().unwrap();
    let server = lease_on(&dir.path().join("notes.db"), &redis, &[]);
    let client = reqwest::Client::new();
    let post = || create(&client, &server, ALICE, Some(b"n"), "{\"title\":\"n\"}").send();
    assert_eq!(post().await.unwrap().status(), 201);
    let before = redis.calls("evalsha");
    for _ in 0..5 {
        assert_eq!(
            post().await.unwrap().headers()["idempotent-replayed"],
            "true"
        );
    }
    assert_eq!(redis.calls("evalsha"), before + 5);
}
