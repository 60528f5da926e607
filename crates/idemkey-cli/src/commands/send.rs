//! `idemkey send`: one HTTP request, retried only where a retry is safe, with one
//! `Idempotency-Key` on every attempt: a curl-like command on the `idemkey-reqwest`
//! middleware, for scripts, cron jobs and CI.
//!
//! stdout gets the final answer's body (after its status line and headers with `-i`), and
//! nothing else; stderr gets `idemkey: key KEY` before the first attempt whenever the
//! request carries a key, so that a caller can run the whole command again with `--key`, and
//! one `idemkey: error: ...` line when there is no final answer. Exit status: 0 for a final
//! 2xx, 1 for another final status, 2 for a usage error (nothing sent), 3 for no final answer
//! (the outcome is unknown; the line says how to run again under the same key).
//!
//! The user named the URL, so its server is declared to honour keys: a lost answer is
//! retried under the key, as before the middleware asked servers to be declared.

use std::io::{Read, Write};
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use idemkey_reqwest::reqwest_middleware::{self, ClientWithMiddleware};
use idemkey_reqwest::{IdempotencyKey, Policy};
use reqwest::{Response, Url, Version};

/// How much of an answer is read before it is handed on, so that an answer cut off within
/// it is retried like a lost one: the whole answer, for the answers an API gives.
const BUFFER_LIMIT: usize = 64 * 1024 * 1024;

/// The longest `--max-time` or `--attempt-timeout`: a deadline beyond the clock's range
/// would be a panic, not a wait.
const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

#[derive(Debug, Args)]
pub(crate) struct SendArgs {
    /// The URL, `http://` or `https://`.
    #[arg(value_parser = parse_url)]
    url: Url,
    /// The method, as given (methods are case-sensitive).
    #[arg(short = 'X', long = "request", value_name = "METHOD", default_value = "POST",
        value_parser = parse_method)]
    method: Method,
    /// A request header, `Name: value`; repeatable. An `Idempotency-Key` header is the
    /// request's key, sent as written.
    #[arg(short = 'H', long = "header", value_name = "NAME: VALUE", value_parser = parse_header)]
    headers: Vec<Header>,
    /// The body: the text itself, `@FILE` for a file's bytes, `-` or `@-` for stdin's. Sent
    /// byte for byte, read into memory first so that a retry sends it again; no Content-Type
    /// is added (give one with -H).
    #[arg(
        short = 'd',
        long = "data",
        value_name = "BODY",
        allow_hyphen_values = true
    )]
    data: Option<String>,
    /// The Idempotency-Key, whatever the method (sent in the draft's quoted form). Default: a
    /// fresh random key for POST and PATCH. The key is printed on stderr before the first
    /// attempt: run the command again with it to resume the same logical request.
    #[arg(long, value_parser = parse_key)]
    key: Option<IdempotencyKey>,
    /// The most time for the whole command, retries and waits included: `60s`, `500ms`,
    /// `2m`, or a number of seconds.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    max_time: Duration,
    /// The most time one attempt waits for its answer, cut to what is left of --max-time, so
    /// that a stalled server does not take the whole budget; also the longest pause in an
    /// answer's body.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    attempt_timeout: Duration,
    /// Retries after the first attempt, at most [default: 10].
    #[arg(long, value_name = "N")]
    retries: Option<u32>,
    /// Print the final answer's status line and headers before its body, as curl -i does.
    #[arg(short = 'i', long)]
    include: bool,
}

/// One `-H` header.
#[derive(Clone, Debug)]
pub(crate) struct Header(HeaderName, HeaderValue);

/// The exit status of a usage error: nothing was sent.
const EXIT_USAGE: u8 = 2;
/// The exit status of no final answer: the outcome is unknown.
const EXIT_NO_ANSWER: u8 = 3;

/// Why the command ends without a final answer: its `idemkey: ` line.
#[derive(Debug)]
enum Stop {
    /// The command line asks for something that cannot be sent.
    Usage(String),
    /// No final answer.
    Failed(String),
}

/// Sends the request and prints its final answer; the exit status says how it ended.
pub(crate) async fn run(args: SendArgs) -> ExitCode {
    init_logs();
    match send(args).await {
        Ok(code) => code,
        Err(Stop::Usage(message)) => {
            eprintln!("idemkey: error: {message} (try --help)");
            ExitCode::from(EXIT_USAGE)
        }
        Err(Stop::Failed(message)) => {
            eprintln!("idemkey: error: {message}");
            ExitCode::from(EXIT_NO_ANSWER)
        }
    }
}

async fn send(args: SendArgs) -> Result<ExitCode, Stop> {
    let key = args.key().map_err(Stop::Usage)?;
    let body = read_body(args.data.as_deref()).map_err(Stop::Usage)?;
    let client = client(&args).map_err(Stop::Failed)?;
    let mut request = client
        .request(args.method.clone(), args.url.clone())
        .headers(args.header_map());
    if let Some(body) = body {
        request = request.body(body);
    }
    if let Some(key) = &key {
        eprintln!("idemkey: key {key}");
        request = request.with_extension(key.clone());
    }
    let exchange = async {
        let response = request
            .send()
            .await
            .map_err(|e| no_answer(e, key.as_ref()))?;
        print(response, args.include).await
    };
    tokio::time::timeout(args.max_time, exchange)
        .await
        .unwrap_or_else(|_| {
            Err(Stop::Failed(format!(
                "no complete answer within --max-time {}{}",
                humantime::format_duration(args.max_time),
                key.as_ref().map(resume_hint).unwrap_or_default()
            )))
        })
}

impl SendArgs {
    /// The request's key: `--key`'s, the `Idempotency-Key` header's, or a fresh one for the
    /// methods that create.
    fn key(&self) -> Result<Option<IdempotencyKey>, String> {
        self.policy()
            .request_key(&self.method, &self.header_map(), self.key.as_ref())
            .map_err(|error| error.to_string())
    }

    fn header_map(&self) -> HeaderMap {
        let mut map = HeaderMap::new();
        for Header(name, value) in &self.headers {
            map.append(name.clone(), value.clone());
        }
        map
    }

    /// The user named the URL: its server is declared to honour keys. Redirects are not
    /// followed, as curl does without `-L`: a redirected POST is not the request the script
    /// sent.
    fn policy(&self) -> Policy {
        let policy = Policy::for_base(self.url.clone())
            .max_redirects(0)
            .max_elapsed(self.max_time)
            .attempt_timeout(self.attempt_timeout)
            .buffer_limit(BUFFER_LIMIT);
        match self.retries {
            Some(retries) => policy.max_retries(retries),
            None => policy,
        }
    }
}

/// The client: https through the system's TLS library, the middleware of the policy. An
/// attempt waits --attempt-timeout for its answer (the policy's), and a body that stalls as
/// long is cut (reqwest's read timeout): a stream's body flows on while it moves.
fn client(args: &SendArgs) -> Result<ClientWithMiddleware, String> {
    let reqwest = reqwest::Client::builder().read_timeout(args.attempt_timeout);
    let builder = idemkey_reqwest::client_builder(reqwest, args.policy())
        .map_err(|error| format!("cannot set up the HTTP client: {error}"))?;
    Ok(builder.build())
}

/// `-d`'s body, read whole: the text, a file's bytes (`@FILE`) or stdin's (`-`, `@-`).
fn read_body(data: Option<&str>) -> Result<Option<Vec<u8>>, String> {
    let Some(data) = data else {
        return Ok(None);
    };
    if data == "-" || data == "@-" {
        let mut body = Vec::new();
        std::io::stdin()
            .read_to_end(&mut body)
            .map_err(|error| format!("cannot read the body from stdin: {error}"))?;
        return Ok(Some(body));
    }
    match data.strip_prefix('@') {
        Some(path) => std::fs::read(path)
            .map(Some)
            .map_err(|error| format!("cannot read the body from {path}: {error}")),
        None => Ok(Some(data.as_bytes().to_vec())),
    }
}

/// The line for a request that ended without a final answer.
fn no_answer(error: reqwest_middleware::Error, key: Option<&IdempotencyKey>) -> Stop {
    let line = format!("gave up: {}", crate::causes(&error.into()));
    Stop::Failed(line + &key.map(resume_hint).unwrap_or_default())
}

/// How to run the command again under the same key, sending the header's same bytes:
/// `--key` sends the draft's quoted form, so a key sent in another form (bare, from `-H`) is
/// given back as the header.
fn resume_hint(key: &IdempotencyKey) -> String {
    let argument = if key.is_quoted_form() {
        format!("--key {}", shell_word(key.as_str()))
    } else {
        let value = String::from_utf8_lossy(key.header_value().as_bytes()).into_owned();
        format!("-H {}", shell_word(&format!("Idempotency-Key: {value}")))
    };
    format!(" (the key is still good: run the same command again with {argument})")
}

/// `text` as one word for a POSIX shell: as it is when it has no character a shell treats
/// specially, else in single quotes.
fn shell_word(text: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_.,:/@%+=".contains(c);
    if !text.is_empty() && text.chars().all(plain) {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

/// Writes the answer to stdout (its head first with `include`); the exit status of its
/// status code.
async fn print(mut response: Response, include: bool) -> Result<ExitCode, Stop> {
    let mut stdout = std::io::stdout();
    let written = |result: std::io::Result<()>| {
        result.map_err(|error| Stop::Failed(format!("cannot write to stdout: {error}")))
    };
    if include {
        written(stdout.write_all(&head(&response)))?;
    }
    let mut received = 0usize;
    loop {
        let chunk = response.chunk().await.map_err(|error| {
            Stop::Failed(format!(
                "the answer ({}) was cut off after {received} bytes of its body: {}",
                response_status(&error),
                crate::causes(&error.into())
            ))
        })?;
        let Some(chunk) = chunk else { break };
        received += chunk.len();
        written(stdout.write_all(&chunk))?;
    }
    written(stdout.flush())?;
    Ok(if response.status().is_success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn response_status(error: &reqwest::Error) -> String {
    error
        .status()
        .map_or_else(|| "its status line came".to_owned(), |s| s.to_string())
}

/// The status line and headers as curl -i prints them: `HTTP/1.1 201 Created`, CRLF line
/// ends, a blank line after the last header.
fn head(response: &Response) -> Vec<u8> {
    let status = response.status();
    let mut line = format!("{} {}", version(response.version()), status.as_str());
    let reason = status.canonical_reason().unwrap_or("");
    if response.version() < Version::HTTP_2 && !reason.is_empty() {
        line.push(' ');
        line.push_str(reason);
    }
    let mut head = line.into_bytes();
    head.extend_from_slice(b"\r\n");
    for (name, value) in response.headers() {
        head.extend_from_slice(name.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"\r\n");
    head
}

fn version(version: Version) -> &'static str {
    match version {
        Version::HTTP_09 => "HTTP/0.9",
        Version::HTTP_10 => "HTTP/1.0",
        Version::HTTP_2 => "HTTP/2",
        Version::HTTP_3 => "HTTP/3",
        _ => "HTTP/1.1",
    }
}

/// Logs on stderr only when `RUST_LOG` asks, so that a script's stderr holds the key and
/// errors alone. Each attempt is a span (`idemkey.attempt`: attempt, key, status, retry),
/// logged as it closes: `RUST_LOG=idemkey_reqwest=debug` prints one line per attempt.
fn init_logs() {
    let Ok(filter) = tracing_subscriber::EnvFilter::try_from_default_env() else {
        return;
    };
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()) && !no_color)
        .with_writer(std::io::stderr)
        .try_init();
}

fn parse_url(value: &str) -> Result<Url, String> {
    let url = Url::parse(value).map_err(|error| format!("{error}"))?;
    match url.scheme() {
        "http" | "https" => Ok(url),
        scheme => Err(format!(
            "expected an http:// or https:// URL, not {scheme}:"
        )),
    }
}

fn parse_method(value: &str) -> Result<Method, String> {
    Method::from_bytes(value.as_bytes()).map_err(|_| "expected a method such as POST".to_owned())
}

fn parse_header(value: &str) -> Result<Header, String> {
    let rule = "expected a header as 'Name: value'";
    let (name, text) = value.split_once(':').ok_or(rule)?;
    let name = HeaderName::try_from(name.trim())
        .map_err(|_| format!("{rule}: the name must be a token"))?;
    let value = HeaderValue::try_from(text.trim())
        .map_err(|_| format!("{rule}: the value has a character a header cannot carry"))?;
    Ok(Header(name, value))
}

fn parse_key(value: &str) -> Result<IdempotencyKey, String> {
    IdempotencyKey::new(value).map_err(|error| error.to_string())
}

/// A duration as humantime writes it (`500ms`, `2m`, `1h 30m`) or, as curl takes it, a
/// number of seconds (`30`, `2.5`); more than zero and at most a year.
fn parse_duration(value: &str) -> Result<Duration, String> {
    let rule = "expected a duration such as 30s, 500ms, 2m or a number of seconds";
    let duration = match value.trim().parse::<f64>() {
        Ok(seconds) => Duration::try_from_secs_f64(seconds).map_err(|_| rule.to_owned())?,
        Err(_) => humantime::parse_duration(value).map_err(|error| format!("{error} ({rule})"))?,
    };
    if duration.is_zero() || duration > MAX_DURATION {
        return Err("expected a duration above 0 and at most a year".to_owned());
    }
    Ok(duration)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn parse(args: &[&str]) -> Result<SendArgs, clap::Error> {
        let argv = ["idemkey", "send"].iter().chain(args);
        match Cli::try_parse_from(argv)?.command {
            Command::Send(args) => Ok(args),
            other => panic!("parsed as {other:?}"),
        }
    }

    fn key_of(args: &[&str]) -> Result<Option<String>, String> {
        let args = parse(args).unwrap();
        args.key().map(|key| key.map(|k| k.as_str().to_owned()))
    }

    #[test]
    fn defaults_are_a_post_with_a_minute_in_all() {
        let args = parse(&["http://127.0.0.1:1/notes"]).unwrap();
        assert_eq!(args.method, Method::POST);
        assert_eq!(args.max_time, Duration::from_secs(60));
        assert_eq!(args.attempt_timeout, Duration::from_secs(30));
        assert_eq!((args.retries, args.include, args.data), (None, false, None));
    }

    #[test]
    fn curls_short_and_long_options_parse() {
        let args = parse(&[
            "-X",
            "PUT",
            "-H",
            "A: 1",
            "--header",
            "b:2",
            "-d",
            "-",
            "-i",
            "--retries",
            "0",
            "http://h/",
        ])
        .unwrap();
        assert_eq!(args.method, Method::PUT);
        assert_eq!(args.headers.len(), 2);
        assert_eq!(args.header_map().get("b").unwrap(), "2");
        assert_eq!(args.data.as_deref(), Some("-"));
        assert!(args.include && args.retries == Some(0));
        let long = parse(&[
            "--request",
            "PATCH",
            "--data",
            "-x",
            "--include",
            "http://h/",
        ]);
        let long = long.unwrap();
        assert_eq!(
            (long.method, long.data.as_deref()),
            (Method::PATCH, Some("-x"))
        );
    }

    #[test]
    fn durations_are_humantime_or_seconds() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert_eq!(parse_duration("2.5"), Ok(Duration::from_millis(2500)));
        for bad in ["", "soon", "0", "0s", "-1", "NaN", "inf", "1e30", "400d"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn headers_need_a_name_and_a_colon() {
        let Header(name, value) = parse_header("Content-Type:  application/json ").unwrap();
        assert_eq!(
            (name.as_str(), value.to_str().unwrap()),
            ("content-type", "application/json")
        );
        assert_eq!(parse_header("X-Empty:").unwrap().1, "");
        for bad in ["NoColon", ": v", "Bad Name: v", "X: a\nb"] {
            assert!(parse_header(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn usage_errors_are_refused_by_the_parser() {
        for bad in [
            &["-H", "NoColon", "http://h/"][..],
            &["--max-time", "soon", "http://h/"],
            &["--key", "has space", "http://h/"],
            &["--retries", "-1", "http://h/"],
            &["ftp://h/"],
            &["not a url"],
            &[],
        ] {
            assert!(parse(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn post_and_patch_get_a_fresh_key_and_other_methods_none() {
        let fresh = key_of(&["http://h/"]).unwrap().unwrap();
        assert_ne!(Some(fresh), key_of(&["http://h/"]).unwrap());
        assert!(key_of(&["-X", "PATCH", "http://h/"]).unwrap().is_some());
        assert_eq!(key_of(&["-X", "GET", "http://h/"]), Ok(None));
        assert_eq!(key_of(&["-X", "PUT", "http://h/"]), Ok(None));
    }

    #[test]
    fn a_given_key_is_kept_whatever_the_method() {
        assert_eq!(
            key_of(&["--key", "k1", "-X", "GET", "http://h/"]),
            Ok(Some("k1".into()))
        );
        let header = ["-H", "Idempotency-Key: \"k2\"", "-X", "DELETE", "http://h/"];
        assert_eq!(key_of(&header), Ok(Some("k2".into())));
        let both = ["--key", "k3", "-H", "idempotency-key: k3", "http://h/"];
        assert_eq!(key_of(&both), Ok(Some("k3".into())));
    }

    #[test]
    fn two_different_keys_or_a_bad_header_key_are_usage_errors() {
        assert!(key_of(&["--key", "a", "-H", "Idempotency-Key: b", "http://h/"]).is_err());
        assert!(key_of(&["-H", "Idempotency-Key: a b", "http://h/"]).is_err());
        assert!(
            key_of(&[
                "-H",
                "Idempotency-Key: a",
                "-H",
                "Idempotency-Key: a",
                "http://h/"
            ])
            .is_err()
        );
    }

    #[test]
    fn the_resume_hint_sends_the_same_bytes() {
        let quoted = IdempotencyKey::new("k-1").unwrap();
        assert!(resume_hint(&quoted).ends_with("again with --key k-1)"));
        let bare = IdempotencyKey::from_header(&HeaderValue::from_static("k-1")).unwrap();
        let hint = resume_hint(&bare);
        assert!(
            hint.ends_with("again with -H 'Idempotency-Key: k-1')"),
            "{hint}"
        );
        let odd = IdempotencyKey::new("it's").unwrap();
        assert!(resume_hint(&odd).ends_with(r"--key 'it'\''s')"));
    }

    #[test]
    fn a_body_is_text_or_a_file() {
        assert_eq!(read_body(None), Ok(None));
        assert_eq!(read_body(Some("a=1")), Ok(Some(b"a=1".to_vec())));
        let file = std::env::temp_dir().join(format!("idemkey-send-{}", std::process::id()));
        std::fs::write(&file, b"\x00bytes\r\n").unwrap();
        let body = read_body(Some(&format!("@{}", file.display())));
        std::fs::remove_file(&file).unwrap();
        assert_eq!(body, Ok(Some(b"\x00bytes\r\n".to_vec())));
        assert!(read_body(Some("@/no/such/file")).is_err());
    }
}
