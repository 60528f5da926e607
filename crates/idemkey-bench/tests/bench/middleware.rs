//! `idemkey-bench middleware`: keyed creates through the client middleware against plain
//! reqwest. Against a server the bench starts, both sides run without errors and the report
//! holds the median ratio and the client's CPU; against a strict test server, both sides are
//! seen to send the same credentials and content type and a fresh key in the draft's quoted
//! form on every request. No timing is asserted.

use std::collections::HashSet;
use std::io;
use std::process::Output;
use std::sync::{Arc, Mutex};

use idemkey_test_support::net::raw::read_request;
use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

fn bench(args: &[&str], json: &std::path::Path) -> (Output, Value) {
    let output = crate::bench_command()
        .arg("middleware")
        .args(args)
        .args(["--json", json.to_str().unwrap()])
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let report = serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    (output, report)
}

/// The two sides, each with `requests` requests and no error.
fn assert_sides(report: &Value, requests: u64) {
    let workload = &report["workloads"][0];
    assert_eq!(workload["name"], "middleware", "{report}");
    let sides = workload["sides"].as_array().unwrap();
    assert_eq!(sides.len(), 2, "{report}");
    for side in sides {
        assert_eq!(side["requests"], requests, "{side}");
        assert_eq!(side["errors"], 0, "{side}");
    }
}

#[idemkey_test_support::test]
fn both_clients_create_on_a_self_started_server() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let args = ["--requests", "40", "--concurrency", "4", "--rounds", "2"];
    let (output, report) = bench(&args, &json);
    assert_sides(&report, 40);
    let ratio = &report["ratios"][0];
    assert_eq!(
        ratio["name"],
        "middleware / plain reqwest, keyed create (throughput, median of 2 pairs)"
    );
    assert!(ratio["value"].as_f64().unwrap() > 0.0, "{ratio}");
    assert_eq!(ratio["target"], ">= 0.97");
    let notes = report["workloads"][0]["notes"].to_string();
    assert!(
        notes.contains("client CPU µs/req (this process): plain "),
        "{notes}"
    );
    assert!(
        notes.contains("retries made by the middleware: 0"),
        "{notes}"
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("reqwest with IdempotencyMiddleware"),
        "{stdout}"
    );
}

/// What the strict server saw: every key, and every request it refused, by reason.
#[derive(Default)]
struct Seen {
    keys: HashSet<String>,
    refused: Vec<String>,
}

/// A server that answers `201` only to `POST /v1/notes` with the bench's credentials, a JSON
/// body and a quoted key it has not seen before; anything else is `400` and noted.
fn strict_server(runtime: &tokio::runtime::Runtime) -> (String, Arc<Mutex<Seen>>) {
    let listener = runtime.block_on(TcpListener::bind("127.0.0.1:0")).unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Seen::default()));
    let shared = seen.clone();
    runtime.spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            // Connections end when the bench closes them.
            tokio::spawn(serve(stream, shared.clone()));
        }
    });
    (url, seen)
}

async fn serve(mut stream: TcpStream, seen: Arc<Mutex<Seen>>) -> io::Result<()> {
    loop {
        let head = read_request(&mut stream).await?;
        let refusal = refusal(&head, &mut seen.lock().unwrap());
        let status = match refusal {
            None => "201 Created",
            Some(why) => {
                seen.lock().unwrap().refused.push(format!("{why}: {head}"));
                "400 Bad Request"
            }
        };
        let body = r#"{"id":"n1","title":"x","created_at":"2026-01-01T00:00:00Z"}"#;
        let answer = format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(answer.as_bytes()).await?;
    }
}

/// Why the request of `head` is refused, if it is.
fn refusal(head: &str, seen: &mut Seen) -> Option<&'static str> {
    let header = |name: &str| {
        head.lines()
            .filter_map(|line| line.split_once(':'))
            .find(|(n, _)| n.trim().eq_ignore_ascii_case(name))
            .map(|(_, value)| value.trim().to_owned())
    };
    if !head.starts_with("POST /v1/notes HTTP/1.1\r\n") {
        return Some("not a create");
    }
    if header("authorization").as_deref() != Some("Bearer x") {
        return Some("not the bench's credentials");
    }
    if header("content-type").as_deref() != Some("application/json") {
        return Some("not JSON");
    }
    let Some(key) = header("idempotency-key") else {
        return Some("no key");
    };
    if key.len() != 38 || !key.starts_with('"') || !key.ends_with('"') {
        return Some("not a quoted UUID");
    }
    if !seen.keys.insert(key) {
        return Some("a key sent before");
    }
    None
}

#[idemkey_test_support::test]
fn both_clients_send_the_same_request_with_a_fresh_quoted_key() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (url, seen) = strict_server(&runtime);
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let args = [
        "--url",
        &url,
        "--token",
        "x",
        "--requests",
        "30",
        "--concurrency",
        "3",
        "--rounds",
        "3",
    ];
    let (_, report) = bench(&args, &json);
    let seen = seen.lock().unwrap();
    assert!(seen.refused.is_empty(), "{:?}", seen.refused);
    assert_sides(&report, 30);
    // 30 measured a side, and a warm-up round of 10 each.
    assert_eq!(seen.keys.len(), 80);
}
