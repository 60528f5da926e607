//! `idemkey send` as scripts run it: the real binary as a process, against a server on
//! 127.0.0.1 that scripts its answers one connection at a time (drops one after reading the
//! request, holds one without answering, asks for a wait) and records every request.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// What the server does with one request.
#[derive(Clone)]
enum Step {
    /// Answers with this status, extra header lines and body, then closes the connection.
    Answer(u16, &'static str, &'static str),
    /// Reads the request, then closes the connection without a word: the server may have
    /// acted, the client cannot know.
    Drop,
    /// Reads the request and never answers.
    Hang,
}

/// A request as the server read it.
#[derive(Clone, Debug)]
struct Seen {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// When its reading ended.
    received: Instant,
    /// When its answer was sent, if one was.
    answered: Option<Instant>,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        let mut values = self
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name));
        values.next().map(|(_, v)| v.as_str())
    }

    fn headers(&self, name: &str) -> Vec<&str> {
        let values = self
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name));
        values.map(|(_, v)| v.as_str()).collect()
    }

    /// The key, unquoted from the draft's form.
    fn key(&self) -> Option<String> {
        let value = self.header("idempotency-key")?;
        Some(value.trim_matches('"').to_owned())
    }
}

/// A scripted server: request N gets step N; after the script, its last step again.
struct Server {
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Server {
    fn start(script: Vec<Step>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/notes", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        thread::spawn(move || serve(&listener, &script, &log));
        Self { url, seen }
    }

    fn url(&self) -> &str {
        &self.url
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

fn serve(listener: &TcpListener, script: &[Step], log: &Mutex<Vec<Seen>>) {
    // Held connections stay open as long as the server does.
    let mut held = Vec::new();
    for (n, stream) in listener.incoming().enumerate() {
        let Ok(mut stream) = stream else { continue };
        let Some(mut seen) = read_request(&stream) else {
            continue;
        };
        match &script[n.min(script.len() - 1)] {
            Step::Answer(status, headers, body) => {
                let answer = format!(
                    "HTTP/1.1 {status} {}\r\ncontent-length: {}\r\nconnection: close\r\n{headers}\r\n{body}",
                    reason(*status),
                    body.len()
                );
                let _ = stream.write_all(answer.as_bytes());
                seen.answered = Some(Instant::now());
                let _ = stream.shutdown(Shutdown::Write);
            }
            Step::Drop => drop(stream),
            Step::Hang => held.push(stream),
        }
        log.lock().unwrap().push(seen);
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        404 => "Not Found",
        422 => "Unprocessable Content",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Whatever",
    }
}

fn read_request(stream: &TcpStream) -> Option<Seen> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next()?.to_owned(), parts.next()?.to_owned());
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).ok()?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':')?;
        headers.push((name.to_owned(), value.trim().to_owned()));
    }
    let length = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .map_or(0, |(_, v)| v.parse().unwrap());
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Seen {
        method,
        path,
        headers,
        body,
        received: Instant::now(),
        answered: None,
    })
}

/// What a run printed and how it ended.
struct Run {
    code: i32,
    stdout: Vec<u8>,
    stderr: String,
}

impl Run {
    fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    fn stderr_lines(&self) -> Vec<&str> {
        self.stderr.lines().collect()
    }

    /// The key the run named on stderr, which must be its only key line.
    fn printed_key(&self) -> String {
        let keys: Vec<&str> = self
            .stderr
            .lines()
            .filter_map(|l| l.strip_prefix("idemkey: key "))
            .collect();
        assert_eq!(keys.len(), 1, "key lines in {:?}", self.stderr);
        keys[0].to_owned()
    }

    /// The one `idemkey: ` line other than the key's.
    fn error_line(&self) -> &str {
        let errors: Vec<&str> = self
            .stderr
            .lines()
            .filter(|l| !l.starts_with("idemkey: key "))
            .collect();
        assert_eq!(errors.len(), 1, "stderr {:?}", self.stderr);
        assert!(errors[0].starts_with("idemkey: "), "{:?}", errors[0]);
        errors[0]
    }
}

fn send(args: &[&str]) -> Run {
    send_with_stdin(args, None)
}

fn send_with_stdin(args: &[&str], stdin: Option<&[u8]>) -> Run {
    let mut command = Command::new(env!("CARGO_BIN_EXE_idemkey"));
    command
        .arg("send")
        .args(args)
        .env_remove("RUST_LOG")
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for proxy in [
        "http_proxy",
        "HTTP_PROXY",
        "https_proxy",
        "HTTPS_PROXY",
        "ALL_PROXY",
    ] {
        command.env_remove(proxy);
    }
    let mut child = command.spawn().unwrap();
    if let Some(bytes) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        pipe.write_all(bytes).unwrap();
    }
    let Output {
        status,
        stdout,
        stderr,
    } = child.wait_with_output().unwrap();
    Run {
        code: status.code().expect("idemkey send was killed by a signal"),
        stdout,
        stderr: String::from_utf8(stderr).unwrap(),
    }
}

/// A port nothing listens on.
fn refused_url() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}/notes")
}

#[test]
fn a_created_answer_is_printed_and_exits_0() {
    let server = Server::start(vec![Step::Answer(201, "", r#"{"id":1}"#)]);
    let run = send(&[server.url(), "-d", r#"{"title":"a"}"#]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout(), r#"{"id":1}"#);
    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        (seen[0].method.as_str(), seen[0].path.as_str()),
        ("POST", "/notes")
    );
    assert_eq!(seen[0].body, br#"{"title":"a"}"#);
    assert_eq!(seen[0].key(), Some(run.printed_key()));
    assert_eq!(run.stderr_lines().len(), 1, "{}", run.stderr);
}

#[test]
fn a_dropped_connection_is_retried_with_the_printed_key() {
    let script = vec![Step::Drop, Step::Drop, Step::Answer(201, "", "made")];
    let server = Server::start(script);
    let run = send(&[server.url(), "-d", "x"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout(), "made");
    let seen = server.seen();
    assert_eq!(seen.len(), 3);
    let key = run.printed_key();
    assert!(
        seen.iter()
            .all(|s| s.key().as_deref() == Some(key.as_str())),
        "{seen:?}"
    );
    assert!(seen.iter().all(|s| s.body == b"x"));
}

#[test]
fn a_given_key_is_printed_and_sent_on_every_attempt() {
    let server = Server::start(vec![Step::Drop, Step::Answer(200, "", "ok")]);
    let run = send(&[server.url(), "--key", "order-42", "-X", "GET"]);
    assert_eq!((run.code, run.printed_key().as_str()), (0, "order-42"));
    let keys: Vec<_> = server.seen().iter().map(Seen::key).collect();
    assert_eq!(
        keys,
        [Some("order-42".to_owned()), Some("order-42".to_owned())]
    );
}

#[test]
fn a_key_in_a_header_is_the_key_and_is_sent_as_written() {
    let server = Server::start(vec![Step::Drop, Step::Answer(201, "", "")]);
    let run = send(&[server.url(), "-H", "Idempotency-Key: \"from-header\""]);
    assert_eq!((run.code, run.printed_key().as_str()), (0, "from-header"));
    let seen = server.seen();
    assert_eq!(seen.len(), 2);
    for request in &seen {
        assert_eq!(request.headers("idempotency-key"), ["\"from-header\""]);
    }
}

#[test]
fn a_bare_key_from_a_header_is_resumed_with_the_same_bytes() {
    let server = Server::start(vec![Step::Drop, Step::Answer(201, "", "")]);
    let header = "Idempotency-Key: bare-7";
    let run = send(&[server.url(), "-H", header, "--retries", "0"]);
    assert_eq!(run.code, 3);
    let error = run.error_line();
    let hint = format!("again with -H '{header}')");
    assert!(error.ends_with(&hint), "{error}");

    // The hinted command, then the same with --key given the printed key: the header wins,
    // so both send the first attempt's bytes.
    let run = send(&[server.url(), "-H", header]);
    assert_eq!(run.code, 0);
    let run = send(&[server.url(), "-H", header, "--key", &run.printed_key()]);
    assert_eq!(run.code, 0);
    let seen = server.seen();
    let sent: Vec<Vec<&str>> = seen.iter().map(|s| s.headers("idempotency-key")).collect();
    assert_eq!(sent, [["bare-7"], ["bare-7"], ["bare-7"]]);

    // A generated key is sent quoted, and `--key` sends that form.
    let server = Server::start(vec![Step::Drop, Step::Answer(201, "", "")]);
    let run = send(&[server.url(), "--retries", "0"]);
    let key = run.printed_key();
    assert!(
        run.error_line()
            .ends_with(&format!("again with --key {key})"))
    );
    assert_eq!(send(&[server.url(), "--key", &key]).code, 0);
    let seen = server.seen();
    assert_eq!(
        seen[0].headers("idempotency-key"),
        seen[1].headers("idempotency-key")
    );
    assert_eq!(seen[0].headers("idempotency-key"), [format!("\"{key}\"")]);
}

#[test]
fn a_get_without_a_key_prints_none_and_sends_none() {
    let server = Server::start(vec![Step::Answer(200, "", "list")]);
    let run = send(&["-X", "GET", server.url()]);
    assert_eq!((run.code, run.stdout().as_str()), (0, "list"));
    assert_eq!(run.stderr, "");
    assert_eq!(server.seen()[0].key(), None);
}

#[test]
fn a_final_status_other_than_2xx_exits_1_with_its_body() {
    let server = Server::start(vec![Step::Answer(404, "", "no such thing")]);
    let run = send(&[server.url()]);
    assert_eq!((run.code, run.stdout().as_str()), (1, "no such thing"));
    assert_eq!(server.seen().len(), 1);
}

#[test]
fn key_reused_is_final_at_once() {
    let problem = r#"{"type":"https://example.com/problems#key-reused","status":422}"#;
    let headers = "content-type: application/problem+json\r\n";
    let server = Server::start(vec![
        Step::Answer(422, headers, problem),
        Step::Answer(201, "", "must not be asked"),
    ]);
    let run = send(&[server.url(), "--key", "k"]);
    assert_eq!((run.code, run.stdout().as_str()), (1, problem));
    assert_eq!(server.seen().len(), 1);
}

#[test]
fn retries_0_makes_one_attempt() {
    let server = Server::start(vec![
        Step::Answer(503, "", "busy"),
        Step::Answer(201, "", ""),
    ]);
    let run = send(&[server.url(), "--retries", "0"]);
    assert_eq!((run.code, run.stdout().as_str()), (1, "busy"));
    assert_eq!(server.seen().len(), 1);

    let server = Server::start(vec![Step::Drop, Step::Answer(201, "", "")]);
    let run = send(&[server.url(), "--retries", "0"]);
    assert_eq!((run.code, run.stdout().as_str()), (3, ""));
    let key = run.printed_key();
    let error = run.error_line();
    assert!(error.contains(&format!("--key {key}")), "{error}");
    assert_eq!(server.seen().len(), 1);
}

#[test]
fn retries_n_makes_n_plus_1_attempts_then_gives_up() {
    let server = Server::start(vec![Step::Drop]);
    let run = send(&[server.url(), "--retries", "2"]);
    assert_eq!(run.code, 3);
    run.error_line();
    assert_eq!(server.seen().len(), 3);
}

#[test]
fn no_answer_within_max_time_exits_3_with_one_line() {
    let server = Server::start(vec![Step::Hang]);
    let run = send(&["-X", "GET", "--max-time", "1", server.url()]);
    assert_eq!((run.code, run.stdout.len()), (3, 0));
    assert_eq!(run.stderr_lines().len(), 1, "{}", run.stderr);
    run.error_line();

    let run = send(&["--max-time", "700ms", refused_url().as_str()]);
    assert_eq!((run.code, run.stdout.len()), (3, 0));
    run.printed_key();
    run.error_line();
}

#[test]
fn a_stalled_attempt_is_cut_by_attempt_timeout_and_retried() {
    let server = Server::start(vec![Step::Hang, Step::Answer(201, "", "second")]);
    let run = send(&[server.url(), "--attempt-timeout", "300ms"]);
    assert_eq!(
        (run.code, run.stdout().as_str()),
        (0, "second"),
        "{}",
        run.stderr
    );
    let seen = server.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].key(), seen[1].key());
}

#[test]
fn retry_after_is_waited_for() {
    let server = Server::start(vec![
        Step::Answer(503, "retry-after: 2\r\n", "later"),
        Step::Answer(201, "", "now"),
    ]);
    let run = send(&[server.url()]);
    assert_eq!(
        (run.code, run.stdout().as_str()),
        (0, "now"),
        "{}",
        run.stderr
    );
    let seen = server.seen();
    let waited = seen[1].received - seen[0].answered.unwrap();
    // A lower bound only: the second attempt did not come before the wait asked for.
    assert!(waited >= Duration::from_secs(2), "{waited:?}");
}

#[test]
fn a_body_comes_from_a_file_or_stdin_byte_for_byte() {
    let bytes = b"{\"a\":1}\r\n\x00\xff tail\n";
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), bytes).unwrap();
    let server = Server::start(vec![Step::Answer(201, "", "")]);
    let at_file = format!("@{}", file.path().display());
    assert_eq!(send(&["-d", at_file.as_str(), server.url()]).code, 0);
    assert_eq!(
        send_with_stdin(&["-d", "-", server.url()], Some(bytes)).code,
        0
    );
    let seen = server.seen();
    assert_eq!(
        (seen[0].body.as_slice(), seen[1].body.as_slice()),
        (&bytes[..], &bytes[..])
    );

    let missing = send(&["-d", "@/no/such/file", server.url()]);
    assert_eq!(missing.code, 2);
    missing.error_line();
    assert_eq!(server.seen().len(), 2);
}

#[test]
fn headers_repeat() {
    let server = Server::start(vec![Step::Answer(200, "", "")]);
    let args = [
        "-H",
        "X-One: 1",
        "--header",
        "X-Two: two",
        "-H",
        "X-One: again",
    ];
    let run = send(&[&args[..], &["-X", "PUT", server.url()]].concat());
    assert_eq!(run.code, 0, "{}", run.stderr);
    let seen = &server.seen()[0];
    assert_eq!(seen.method, "PUT");
    assert_eq!(seen.headers("x-one"), ["1", "again"]);
    assert_eq!(seen.headers("x-two"), ["two"]);
}

#[test]
fn include_prints_the_status_line_and_headers_first() {
    let server = Server::start(vec![Step::Answer(201, "x-test: yes\r\n", "body")]);
    let run = send(&["-i", server.url()]);
    assert_eq!(run.code, 0);
    let out = run.stdout();
    assert!(out.starts_with("HTTP/1.1 201 Created\r\n"), "{out:?}");
    assert!(out.contains("\r\nx-test: yes\r\n"), "{out:?}");
    assert!(out.ends_with("\r\n\r\nbody"), "{out:?}");
}

#[test]
fn usage_errors_exit_2_with_one_line_and_send_nothing() {
    let server = Server::start(vec![Step::Answer(201, "", "")]);
    let url = server.url();
    let cases: [&[&str]; 8] = [
        &["-H", "NoColon", url],
        &["--max-time", "soon", url],
        &["--attempt-timeout", "0", url],
        &["--key", "has space", url],
        &["--key", "a", "-H", "Idempotency-Key: b", url],
        &["-H", "Idempotency-Key: two words", url],
        &["ftp://127.0.0.1/"],
        &[],
    ];
    for args in cases {
        let run = send(args);
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        assert_eq!(run.stdout.len(), 0, "{args:?}");
        assert_eq!(run.stderr_lines().len(), 1, "{args:?}: {}", run.stderr);
        assert!(
            run.stderr.starts_with("idemkey: "),
            "{args:?}: {}",
            run.stderr
        );
    }
    assert_eq!(server.seen().len(), 0);
}
