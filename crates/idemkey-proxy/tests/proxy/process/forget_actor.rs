//! A credential revoked upstream keeps its replays at the proxy for the retention, until
//! `idemkey forget --proxy-credential` forgets its actor's records: then its retry goes
//! upstream and is refused there, while another credential's records still replay.

use std::collections::HashSet;
use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use idemkey_test_support::process::binary;
use idemkey_test_support::process::proxy::Proxy;
use idemkey_test_support::process::redis::RedisServer;

use super::sqlite_url;

/// The token whose records are forgotten: it must never be printed.
const REVOKED: &str = "tok-revoked-5ecret";
const OTHER: &str = "tok-other";

/// An upstream that checks bearer tokens, some of which it revokes, and counts what it runs.
#[derive(Clone, Default)]
struct Tokens {
    revoked: Arc<Mutex<HashSet<String>>>,
    /// Every request it answered: (token, status).
    seen: Arc<Mutex<Vec<(String, u16)>>>,
}

impl Tokens {
    async fn start(&self) -> String {
        let app = axum::Router::new()
            .route("/items", axum::routing::post(create))
            .with_state(self.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{addr}")
    }

    fn revoke(&self, token: &str) {
        self.revoked.lock().unwrap().insert(token.to_owned());
    }

    /// How many requests of `token` the upstream answered.
    fn calls(&self, token: &str) -> usize {
        let seen = self.seen.lock().unwrap();
        seen.iter().filter(|(who, _)| who == token).count()
    }
}

async fn create(State(tokens): State<Tokens>, headers: HeaderMap) -> (StatusCode, String) {
    let token = headers
        .get("authorization")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .unwrap_or_default()
        .to_owned();
    let revoked = tokens.revoked.lock().unwrap().contains(&token);
    let mut seen = tokens.seen.lock().unwrap();
    let (status, body) = if revoked {
        (
            StatusCode::UNAUTHORIZED,
            "{\"error\":\"revoked\"}".to_owned(),
        )
    } else {
        let id = seen.len() + 1;
        (StatusCode::CREATED, format!("{{\"id\":{id}}}"))
    };
    seen.push((token, status.as_u16()));
    (status, body)
}

async fn post(proxy: &Proxy, token: &str, key: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(proxy.url("/items"))
        .header("authorization", format!("Bearer {token}"))
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap()
}

fn replayed(response: &reqwest::Response) -> bool {
    response.headers().get("idempotent-replayed").is_some()
}

/// `idemkey forget` with `args`, `stdin` written to its input; the token never in its output.
fn forget(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(binary::idemkey())
        .arg("forget")
        .args(args)
        .env_remove("IDEMKEY_SECRET")
        .env_remove("IDEMKEY_DATABASE_URL")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        !printed.contains("5ecret"),
        "the credential was printed: {printed}"
    );
    output
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The revoked token's replay is served until its actor is forgotten, then its retry is
/// refused upstream; the other token's record still replays.
async fn revoked_then_forgotten(proxy: &Proxy, tokens: &Tokens, forget_args: &[&str], stdin: &str) {
    assert_eq!(post(proxy, REVOKED, "k1").await.status(), 201);
    assert_eq!(post(proxy, OTHER, "k1").await.status(), 201);
    tokens.revoke(REVOKED);
    // The finding: upstream refuses the token, yet its record still replays.
    assert_eq!(post(proxy, REVOKED, "k2").await.status(), 401);
    let replay = post(proxy, REVOKED, "k1").await;
    assert_eq!(replay.status(), 201);
    assert!(replayed(&replay));
    assert_eq!(tokens.calls(REVOKED), 2);

    let forgot = forget(forget_args, stdin);
    assert!(forgot.status.success(), "{forgot:?}");
    assert!(
        stdout(&forgot).starts_with("forgot 1 records of that credential's proxy actor (header:"),
        "{forgot:?}"
    );

    // No more replay: the retry goes upstream, which refuses the token.
    let refused = post(proxy, REVOKED, "k1").await;
    assert_eq!(refused.status(), 401);
    assert!(!replayed(&refused));
    assert_eq!(tokens.calls(REVOKED), 3);
    // The other actor's record is untouched.
    let theirs = post(proxy, OTHER, "k1").await;
    assert!(replayed(&theirs) && theirs.status() == 201);
    assert_eq!(tokens.calls(OTHER), 1);
    // Nothing is left to forget: exit 1, one line.
    let again = forget(forget_args, stdin);
    assert_eq!(again.status.code(), Some(1), "{again:?}");
    assert_eq!(String::from_utf8_lossy(&again.stderr).lines().count(), 1);
}

/// On SQLite with the store's own secret, the credential on the command line.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_tokens_replays_end_when_its_actor_is_forgotten() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = Tokens::default();
    let proxy = Proxy::start(
        binary::idemkey(),
        &tokens.start().await,
        &sqlite_url(&dir),
        &[],
    );
    let credential = format!("Authorization: Bearer {REVOKED}");
    let url = sqlite_url(&dir);
    let args = ["--database-url", &url, "--proxy-credential", &credential];
    revoked_then_forgotten(&proxy, &tokens, &args, "").await;
}

/// On Redis, the proxy keyed by a secret of its own, which forget reads from a file; the
/// credential from stdin. No replay cache: a forget by another process reaches a cache
/// within microseconds, not before the next request by construction.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [redis_server])]
async fn on_redis_with_a_secret_the_credential_read_from_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "proxy secret\n").unwrap();
    let redis = RedisServer::start(&[]);
    let tokens = Tokens::default();
    let flags = ["--secret", "proxy secret", "--no-replay-cache"];
    let proxy = Proxy::start(
        binary::idemkey(),
        &tokens.start().await,
        &redis.url(),
        &flags,
    );
    let secret = secret.to_str().unwrap();
    let url = redis.url();
    let args = [
        "--database-url",
        &url,
        "--proxy-credential",
        "-",
        "--secret-file",
        secret,
    ];
    let credential = format!("Authorization: Bearer {REVOKED}\n");
    revoked_then_forgotten(&proxy, &tokens, &args, &credential).await;
}

/// Bad input is one line on stderr and a non-zero exit, the credential not shown, before any
/// store is opened.
#[idemkey_test_support::test]
fn bad_credentials_are_refused_without_being_shown() {
    let nowhere = "sqlite:///nonexistent/idemkey/forget.db";
    for credential in [
        format!("Bearer {REVOKED}"),
        format!("X-Api-Key: {REVOKED}"),
        format!("Authorization:{REVOKED}\u{7f}"),
        "Authorization:".to_owned(),
    ] {
        let args = ["--database-url", nowhere, "--proxy-credential", &credential];
        let refused = forget(&args, "");
        assert_eq!(refused.status.code(), Some(1), "{refused:?}");
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains("--proxy-credential"), "{stderr}");
    }
    // --actor and --proxy-credential name the actor twice: a usage error.
    let both = ["--actor", "a", "--proxy-credential", "Authorization: x"];
    let refused = forget(&[&["--database-url", nowhere][..], &both].concat(), "");
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
}
