//! `client`'s campaigns through `idemkey send` processes, as a script would run them: each
//! logical create is one `idemkey send ... -i`, with a key of the caller's (`--key`) or of
//! send's own, through the lossy relay while the server is SIGKILLed and restarted. Exactly
//! one note per create, and each process's stdout is a 201 (first or replayed) with its own
//! note's id, its exit status 0, and its stderr names the key it used.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::IDEMKEY;
use crate::client::{Create, Outcome, Plan, Sender, Setup, run};

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_exactly_once_through_faults_serve_atomic() {
    run(Setup::Atomic, plan("send serve atomic"), send_sender).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_exactly_once_through_faults_serve_lease() {
    run(Setup::Lease, plan("send serve lease"), send_sender).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [python3])]
async fn send_exactly_once_through_faults_proxy() {
    run(Setup::Proxy, plan("send proxy"), send_sender).await;
}

/// 16 creates from 4 callers, the server killed 3 times: each create is a process.
fn plan(name: &'static str) -> Plan {
    Plan {
        name,
        callers: 4,
        creates: 4,
        kills: 3,
    }
}

/// Callers that run `idemkey send`: even ones give a key of their own, odd ones take send's.
fn send_sender(_relay: SocketAddr, _callers: usize) -> Sender {
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    Arc::new(move |n, create| {
        let number = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let key = n.is_multiple_of(2).then(|| format!("send-{n}-{number}"));
        Box::pin(through_send(create, key))
    })
}

/// One create as one `idemkey send -i` process: its final answer, read from stdout.
async fn through_send(create: Create, key: Option<String>) -> Outcome {
    let mut command = tokio::process::Command::new(IDEMKEY);
    command
        .args(["send", &create.url, "-X", "POST", "-i"])
        .args(["-H", &format!("Authorization: Bearer {}", create.secret)])
        .args(["-H", "Content-Type: application/json"])
        .args(["-d", &create.body()])
        // The budget of the middleware campaigns: a restart and a stranded claim's lease fit.
        .args(["--max-time", "60s", "--retries", "40"])
        .env_remove("RUST_LOG");
    if let Some(key) = &key {
        command.args(["--key", key]);
    }
    let output = command.output().await.unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let (status, replayed, body) = answer(&stdout);
    let id = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|body| body["id"].as_str().map(str::to_owned));
    Outcome {
        status,
        id,
        replayed,
        attempts: None,
        error: (!output.status.success()).then(|| format!("{}: {stderr}", output.status)),
        wrong: wrong(output.status.code(), status, &stderr, key.as_deref()),
    }
}

/// The status, whether it was a replay, and the body of `-i`'s output.
fn answer(stdout: &str) -> (Option<u16>, Option<bool>, &str) {
    let Some((head, body)) = stdout.split_once("\r\n\r\n") else {
        return (None, None, stdout);
    };
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok());
    let replayed = head
        .lines()
        .any(|line| line.eq_ignore_ascii_case("idempotent-replayed: true"));
    (status, Some(replayed), body)
}

/// What breaks send's contract: an exit status that does not match the final status, or a
/// key line missing, repeated or naming another key than the one given.
fn wrong(
    code: Option<i32>,
    status: Option<u16>,
    stderr: &str,
    given: Option<&str>,
) -> Option<String> {
    let expected = match status {
        Some(200..=299) => 0,
        Some(_) => 1,
        None => 3,
    };
    if code != Some(expected) {
        return Some(format!("exit {code:?} for status {status:?}: {stderr}"));
    }
    let keys: Vec<&str> = stderr
        .lines()
        .filter_map(|line| line.strip_prefix("idemkey: key "))
        .collect();
    match (keys.as_slice(), given) {
        ([used], Some(given)) if *used == given => None,
        ([_], None) => None,
        _ => Some(format!("key lines {keys:?}, given {given:?}: {stderr}")),
    }
}
