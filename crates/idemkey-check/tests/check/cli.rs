//! The `idemkey check` surface: arguments, exit statuses, the JSON report, one-line errors.

use clap::Parser;
use idemkey_check::{CheckArgs, CheckStatus, Checker, Error, Report, run};

use crate::server::{Bugs, TestServer};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: CheckArgs,
}

fn args(extra: &[&str]) -> CheckArgs {
    let base = [
        "check",
        "--body",
        r#"{"title":"a"}"#,
        "--alt-body",
        r#"{"title":"b"}"#,
    ];
    Cli::try_parse_from(base.iter().chain(extra))
        .expect("arguments")
        .args
}

fn usage_error(extra: &[&str]) -> Error {
    let error = args(extra)
        .to_config()
        .and_then(Checker::new)
        .expect_err("a usage error");
    assert!(!error.to_string().contains('\n'), "not one line: {error}");
    error
}

#[test]
fn the_arguments_are_well_formed() {
    use clap::CommandFactory;
    Cli::command().debug_assert();
}

#[test]
fn bad_input_is_a_one_line_usage_error() {
    let url = "http://127.0.0.1:9/v1/notes";
    assert!(matches!(
        usage_error(&[url, "-H", "no colon"]),
        Error::InvalidHeader { .. }
    ));
    assert!(matches!(
        usage_error(&[url, "--actor2-header", "x y: z"]),
        Error::InvalidHeader { .. }
    ));
    assert!(matches!(
        usage_error(&["https://example.com/v1/notes"]),
        Error::InvalidUrl { .. }
    ));
    assert!(matches!(usage_error(&["::nope"]), Error::InvalidUrl { .. }));
    assert!(matches!(
        usage_error(&[url, "--invalid-body", "{"]),
        Error::InvalidJson { .. }
    ));
    assert!(matches!(
        usage_error(&[url, "--concurrency", "1"]),
        Error::InvalidConfig(_)
    ));
    let same = Cli::try_parse_from(["check", url, "--body", "{}", "--alt-body", "{ }"])
        .unwrap()
        .args;
    assert!(matches!(
        same.to_config().and_then(Checker::new),
        Err(Error::InvalidConfig(_))
    ));
}

#[tokio::test]
async fn usage_errors_exit_2() {
    let status = run(args(&["http://127.0.0.1:9/v1/notes", "-H", "broken"])).await;
    assert_eq!(status, CheckStatus::Error);
    assert_eq!(status.code(), 2);
}

#[tokio::test]
async fn an_unreachable_server_exits_2() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1/notes", listener.local_addr().unwrap());
    drop(listener);
    let error = Checker::new(args(&[&url]).to_config().unwrap())
        .unwrap()
        .run()
        .await
        .unwrap_err();
    assert!(matches!(error, Error::Connect { .. }), "{error}");
    assert_eq!(
        run(args(&[&url, "--timeout", "2"])).await,
        CheckStatus::Error
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passing_run_exits_0_and_writes_the_json_report() {
    let server = TestServer::start(Bugs::default()).await;
    let dir = std::env::temp_dir().join(format!("idemkey-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("report.json");
    let url = server.create_url();
    let extra = [
        url.as_str(),
        "-H",
        "Authorization: Bearer s1",
        "--actor2-header",
        "Authorization: Bearer s2",
        "--list",
        "/v1/notes",
        "--invalid-body",
        r#"{"title":""}"#,
        "--concurrency",
        "8",
        "--json",
        path.to_str().unwrap(),
    ];
    assert_eq!(run(args(&extra)).await, CheckStatus::Passed);
    let report: Report = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(report.summary.passed, 10, "{}", report.table());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_case_exits_1() {
    let server = TestServer::start(Bugs {
        no_fingerprint: true,
        ..Bugs::default()
    })
    .await;
    let url = server.create_url();
    let extra = [
        url.as_str(),
        "-H",
        "Authorization: Bearer s1",
        "--case",
        "mismatch",
        "--case",
        "replay",
    ];
    assert_eq!(run(args(&extra)).await, CheckStatus::Failed);
}
