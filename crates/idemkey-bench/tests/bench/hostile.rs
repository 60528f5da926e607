//! `idemkey-bench --url` against a hostile service: a real HTTP/1.1 server on raw sockets
//! whose answers never end. The bench must end by itself (the test kills it after [`GUARD`]),
//! exit with a code it documents (no signal, no panic), count what it could not read as
//! errors or name the limit in its error, and keep its peak memory under [`PEAK_KIB`]. No
//! timing is asserted.
//!
//! A server that stalls costs a run 10 s per request (the bench's request timeout), too slow
//! for here: stalls are tested against the client with shorter limits (`bench::client`'s unit
//! tests).

use std::io;
use std::net::SocketAddr;
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use idemkey_test_support::net::raw::read_request;
use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

/// A run still going after this is killed and fails the test: before the limits, the bench
/// never ended against these servers.
const GUARD: Duration = Duration::from_secs(120);

/// The bench's peak resident memory (`VmHWM`) must stay under this, in KiB: 256 MiB. Before
/// the limits, an endless body crossed it in well under a second (2 GB was observed); with
/// them, a run holds at most 1 MiB of a body, or about twice 64 MiB of the storm's listing.
const PEAK_KIB: u64 = 256 * 1024;

/// Bytes in each chunk of an endless body.
const CHUNK: usize = 64 * 1024;

/// How the server answers.
#[derive(Clone, Copy, Debug)]
enum Hostile {
    /// Every request: a `201` head, then a chunked body that never ends.
    EndlessBody,
    /// Creates get a small, well-formed `201`; `GET /v1/notes` gets a list that never ends.
    EndlessListing,
}

/// Starts a server answering as `hostile` on 127.0.0.1, on `runtime`; returns its address.
fn start(runtime: &tokio::runtime::Runtime, hostile: Hostile) -> SocketAddr {
    let listener = runtime.block_on(TcpListener::bind("127.0.0.1:0")).unwrap();
    let addr = listener.local_addr().unwrap();
    runtime.spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            // The bench giving up mid-answer is how these connections are meant to end.
            tokio::spawn(async move { drop(serve(stream, hostile).await) });
        }
    });
    addr
}

/// Answers the requests of one keep-alive connection until the client leaves.
async fn serve(mut stream: TcpStream, hostile: Hostile) -> io::Result<()> {
    loop {
        let head = read_request(&mut stream).await?;
        match (hostile, head.starts_with("GET /v1/notes ")) {
            (Hostile::EndlessListing, false) => created(&mut stream).await?,
            (Hostile::EndlessListing, true) => {
                endless(
                    &mut stream,
                    "HTTP/1.1 200 OK",
                    "{\"notes\":[",
                    "{\"title\":\"x\"},",
                )
                .await?
            }
            (Hostile::EndlessBody, _) => {
                endless(&mut stream, "HTTP/1.1 201 Created", "", " ").await?
            }
        }
    }
}

/// A well-formed `201` of the notes service.
async fn created(stream: &mut TcpStream) -> io::Result<()> {
    let body = r#"{"id":"n1","title":"x","created_at":"2026-01-01T00:00:00Z"}"#;
    let head = format!(
        "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream
        .write_all([head.as_bytes(), body.as_bytes()].concat().as_slice())
        .await
}

/// `status`, then a chunked body of `start` and `unit` repeated until the write fails.
async fn endless(stream: &mut TcpStream, status: &str, start: &str, unit: &str) -> io::Result<()> {
    let head =
        format!("{status}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n");
    stream.write_all(head.as_bytes()).await?;
    // A chunk of size 0 would end the body.
    if !start.is_empty() {
        let first = format!("{:x}\r\n{start}\r\n", start.len());
        stream.write_all(first.as_bytes()).await?;
    }
    let data = unit.repeat(CHUNK / unit.len());
    let chunk = format!("{:x}\r\n{data}\r\n", data.len());
    loop {
        stream.write_all(chunk.as_bytes()).await?;
    }
}

/// A finished bench run.
struct Run {
    status: ExitStatus,
    stdout: String,
    stderr: String,
    peak_kib: u64,
}

/// Runs `idemkey-bench ARGS --url http://ADDR --token x`, sampling its peak memory until it
/// exits; kills it and fails past [`GUARD`] or [`PEAK_KIB`].
fn bench(addr: SocketAddr, args: &[&str]) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let (out, err) = (dir.path().join("stdout"), dir.path().join("stderr"));
    let url = format!("http://{addr}");
    let mut child = crate::bench_command()
        .args(args)
        .args(["--url", &url, "--token", "x"])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let mut peak_kib = 0;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        // VmHWM only grows, so sampling it misses nothing but the last few milliseconds.
        peak_kib = peak_kib.max(peak_rss_kib(child.id()).unwrap_or(0));
        if peak_kib > PEAK_KIB || started.elapsed() > GUARD {
            child.kill().unwrap();
            child.wait().unwrap();
            let stderr = std::fs::read_to_string(&err).unwrap();
            panic!(
                "bench {args:?} killed: peak RSS {} MiB (bound {} MiB) after {:?} (guard {GUARD:?})\n{stderr}",
                peak_kib / 1024,
                PEAK_KIB / 1024,
                started.elapsed()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let read = |path| std::fs::read_to_string(path).unwrap();
    Run {
        status,
        stdout: read(&out),
        stderr: read(&err),
        peak_kib,
    }
}

/// The peak resident set of process `pid` in KiB (`VmHWM` in `/proc/PID/status`); `None`
/// once it has exited, or where there is no `/proc` (there only the guard holds).
fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Exited by itself with `code`, no panic; prints the run for a failing assertion's context.
fn assert_exited(run: &Run, code: i32) {
    println!(
        "peak RSS {} KiB\n{}\n{}",
        run.peak_kib, run.stdout, run.stderr
    );
    assert_eq!(run.status.code(), Some(code), "{}", run.stderr);
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

/// Every create answered with an endless body: each is read up to the limit and counted as
/// an error (status 0, no answer), and the run completes with its report.
#[idemkey_test_support::test]
fn endless_bodies_are_errors_and_the_run_ends() {
    let runtime = runtime();
    let addr = start(&runtime, Hostile::EndlessBody);
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let json_arg = json.to_str().unwrap();
    let args = [
        "create",
        "--requests",
        "5",
        "--concurrency",
        "2",
        "--json",
        json_arg,
    ];
    let run = bench(addr, &args);
    // Exit 1 is only for the storm's check; errors are counted in the tables.
    assert_exited(&run, 0);
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let sides = report["workloads"][0]["sides"].as_array().unwrap();
    assert_eq!(sides.len(), 2, "{report}");
    for side in sides {
        // 5 requests per side, in 10 rounds of at least one.
        assert_eq!(side["requests"], 10, "{side}");
        assert_eq!(side["errors"], 10, "{side}");
        assert_eq!(side["error_statuses"]["0"], 10, "{side}");
    }
}

/// The replay workload's first create (a setup request) is bounded too: the run fails with
/// one error line naming the limit.
#[idemkey_test_support::test]
fn an_endless_body_fails_the_replay_setup() {
    let runtime = runtime();
    let addr = start(&runtime, Hostile::EndlessBody);
    let run = bench(addr, &["replay", "--requests", "5", "--concurrency", "2"]);
    assert_exited(&run, 1);
    assert!(
        run.stderr.contains("idemkey-bench: error: ") && run.stderr.contains("1 MiB limit"),
        "{}",
        run.stderr
    );
}

/// The storm's creates are answered well, its counting `GET /v1/notes` with a list that
/// never ends: read up to its own limit, then the run fails naming it.
#[idemkey_test_support::test]
fn an_endless_listing_fails_the_storm_check() {
    let runtime = runtime();
    let addr = start(&runtime, Hostile::EndlessListing);
    let args = [
        "storm",
        "--requests",
        "2",
        "--storm-clients",
        "2",
        "--concurrency",
        "1",
    ];
    let run = bench(addr, &args);
    assert_exited(&run, 1);
    assert!(
        run.stderr.contains("GET /v1/notes") && run.stderr.contains("64 MiB limit"),
        "{}",
        run.stderr
    );
}
