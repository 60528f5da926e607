//! Running `idemkey serve` as a real process and talking to it over real sockets.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

pub mod load;
pub mod pg;
pub mod relay;
pub mod storm;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The secrets of the two actors every test server knows.
pub const ALICE: &str = "alice-secret";
pub const BOB: &str = "bob-secret";

/// A running `idemkey serve`, killed when dropped.
pub struct Server {
    pub child: Child,
    pub addr: SocketAddr,
    pub db: PathBuf,
}

impl Server {
    /// Starts a server on a fresh SQLite file in `dir`, with `extra` arguments.
    pub fn start(dir: &Path, extra: &[&str]) -> Self {
        Self::start_on(&dir.join("notes.db"), extra)
    }

    /// Starts a server on the SQLite file `db`.
    pub fn start_on(db: &Path, extra: &[&str]) -> Self {
        Self::start_url(&format!("sqlite://{}", db.display()), db, extra)
    }

    /// Starts a server on the database at `url`; `db` is only remembered.
    pub fn start_url(url: &str, db: &Path, extra: &[&str]) -> Self {
        Self::spawn("127.0.0.1:0", url, db, extra)
    }

    /// Starts another server on this one's SQLite file and address (after it died).
    pub fn again(&self, extra: &[&str]) -> Self {
        let url = format!("sqlite://{}", self.db.display());
        Self::spawn(&self.addr.to_string(), &url, &self.db, extra)
    }

    fn spawn(listen: &str, url: &str, db: &Path, extra: &[&str]) -> Self {
        let mut args = vec!["serve", "--listen", listen, "--database-url", url];
        args.extend(["--token", "alice=alice-secret", "--token", "bob=bob-secret"]);
        args.extend_from_slice(extra);
        let mut child = Command::new(env!("CARGO_BIN_EXE_idemkey"))
            .args(&args)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let addr = listening_addr(&mut child);
        Self {
            child,
            addr,
            db: db.to_path_buf(),
        }
    }

    /// The URL of a path on this server.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Waits for the process to exit (after a signal sent elsewhere).
    pub fn terminate_wait(mut self) -> std::process::ExitStatus {
        self.child.wait().unwrap()
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        self.child.wait().unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The address a just-spawned `idemkey serve` prints on its first line of stdout; its stdout
/// is drained from then on.
pub fn listening_addr(child: &mut Child) -> SocketAddr {
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let line = lines.next().expect("the server printed nothing").unwrap();
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("unexpected first line: {line}"));
    // Keep draining stdout so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    addr.parse().unwrap()
}

/// A POST /v1/notes with a key (raw bytes allowed) and a body.
pub fn create(
    client: &reqwest::Client,
    server: &Server,
    secret: &str,
    key: Option<&[u8]>,
    body: &str,
) -> reqwest::RequestBuilder {
    let mut request = client
        .post(server.url("/v1/notes"))
        .header("authorization", format!("Bearer {secret}"))
        .header("content-type", "application/json")
        .body(body.to_owned());
    if let Some(key) = key {
        request = request.header(
            "idempotency-key",
            reqwest::header::HeaderValue::from_bytes(key).unwrap(),
        );
    }
    request
}

/// The number of notes an actor has.
pub async fn count_notes(client: &reqwest::Client, server: &Server, secret: &str) -> usize {
    let list: serde_json::Value = client
        .get(server.url("/v1/notes"))
        .header("authorization", format!("Bearer {secret}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    list["notes"].as_array().unwrap().len()
}

/// Runs an `idemkey` command to completion, returning its exit status and output.
pub fn idemkey(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_idemkey"))
        .args(args)
        .output()
        .unwrap()
}

/// Counts the rows of a table of a server's SQLite database.
pub async fn count_rows(db: &Path, table: &str) -> i64 {
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    let count = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
        .fetch_one(&pool)
        .await
        .unwrap();
    pool.close().await;
    count
}

/// The notes of a server's SQLite database, by title: each key's note ids.
pub async fn notes_by_title(db: &Path) -> std::collections::BTreeMap<String, Vec<String>> {
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    let rows: Vec<(String, String)> = sqlx::query_as("SELECT title, id FROM notes")
        .fetch_all(&pool)
        .await
        .unwrap();
    pool.close().await;
    by_title(rows)
}

/// `(title, id)` rows of the notes table, grouped: each key's note ids.
pub fn by_title(rows: Vec<(String, String)>) -> std::collections::BTreeMap<String, Vec<String>> {
    let mut by_title = std::collections::BTreeMap::<String, Vec<String>>::new();
    for (title, id) in rows {
        by_title.entry(title).or_default().push(id);
    }
    by_title
}
