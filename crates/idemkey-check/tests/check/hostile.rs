//! The checker against servers that attack it: absurd chunk sizes, bodies that never end, and
//! terminal escape sequences meant for the user's screen. Each must end as a case's verdict
//! with readable evidence — never a panic, unbounded memory, a hang, or raw escapes.

mod server;

use std::time::Duration;

use idemkey_check::{CaseId, CheckConfig, Checker, Report};

use self::server::{Hostile, HostileServer};

/// Runs `config` to completion; a panic in the checker fails the test here.
async fn check(config: CheckConfig) -> Report {
    Checker::new(config)
        .expect("valid config")
        .run()
        .await
        .expect("server reachable")
}

/// Panics unless case `id` failed with evidence containing `needle`.
fn assert_failed_with(report: &Report, id: CaseId, needle: &str) {
    let case = report.case(id).expect("case ran");
    assert_eq!(case.verdict.as_str(), "fail", "{id}: {:?}", case.evidence);
    assert!(
        case.evidence.contains(needle),
        "{id}: {:?} lacks {needle:?}",
        case.evidence
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_chunk_size_fails_the_case_without_a_panic() {
    let server = HostileServer::start(Hostile::HugeChunk).await;
    let config =
        server
            .config()
            .cases([CaseId::InvalidKeys, CaseId::ConcurrentBurst, CaseId::Replay]);
    let report = check(config).await;
    // The raw reader (a single exchange, and the burst's concurrent ones) names the bad chunk.
    assert_failed_with(&report, CaseId::InvalidKeys, "chunk size");
    assert_failed_with(&report, CaseId::ConcurrentBurst, "chunk size");
    // The HTTP client path rejects it too, as a failed request.
    assert_failed_with(&report, CaseId::Replay, "request failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_body_is_cut_off_at_the_body_limit() {
    let server = HostileServer::start(Hostile::EndlessBody).await;
    // The limit, not this timeout, must end every read: the evidence has to name the limit.
    let config = server
        .config()
        .list_url("/v1/notes")
        .expect("list url")
        .timeout(Duration::from_secs(10))
        .cases([CaseId::Replay, CaseId::Mismatch, CaseId::InvalidKeys]);
    let report = check(config).await;
    // `replay` reads a create response and `mismatch` the list through the HTTP client;
    // `invalid-keys` reads through the raw reader.
    for id in [CaseId::Replay, CaseId::Mismatch, CaseId::InvalidKeys] {
        assert_failed_with(&report, id, "exceeds the 16 MiB limit");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_never_comes_is_cut_off_by_the_timeout() {
    // No byte arrives, so no size limit helps: only the request timeout ends these reads. Both
    // paths already had it (the HTTP client's total timeout covers the body); this guards it.
    let server = HostileServer::start(Hostile::StalledBody).await;
    let config = server
        .config()
        .timeout(Duration::from_secs(1))
        .cases([CaseId::Replay, CaseId::InvalidKeys]);
    let report = check(config).await;
    for id in [CaseId::Replay, CaseId::InvalidKeys] {
        assert_failed_with(&report, id, "timed out");
    }
}

/// Clears the screen, homes the cursor, sets green with a one-character CSI (U+009B), rings
/// the bell and reverses the text direction: raw bytes, not JSON.
const RAW_ESCAPES: &[u8] = b"\x1b[2J\x1b[H\xc2\x9b32m\x07\xe2\x80\xae all cases PASS";
/// The same attack smuggled through a JSON string escape into a resource id.
const JSON_ESCAPES: &[u8] = br#"{"id":"\u001b]0;pwned\u0007\u009b2J\u202e"}"#;

/// Panics if `text` holds a control or bidirectional formatting character other than the
/// table's own line breaks.
fn assert_printable(text: &str) {
    let unsafe_chars: Vec<char> = text
        .chars()
        .filter(|&c| (c.is_control() && c != '\n') || ('\u{202a}'..='\u{202e}').contains(&c))
        .collect();
    assert!(
        unsafe_chars.is_empty(),
        "{unsafe_chars:?} printed raw in {text:?}"
    );
}

/// `table` without borders and spacing, which vary with the terminal's width.
fn without_layout(table: &str) -> String {
    table
        .chars()
        .filter(|c| !c.is_whitespace() && !matches!(c, '\u{2500}'..='\u{257f}'))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escape_sequences_from_the_server_are_escaped_in_the_report() {
    // `mismatch` quotes the raw body (the server answers both bodies alike); `replay` passes
    // and names the resource id. Each attack must show up escaped, in full.
    let attacks = [
        (
            RAW_ESCAPES,
            CaseId::Mismatch,
            r"\u{1b}[2J\u{1b}[H\u{9b}32m\u{7}\u{202e}allcasesPASS",
        ),
        (
            JSON_ESCAPES,
            CaseId::Replay,
            r"\u{1b}]0;pwned\u{7}\u{9b}2J\u{202e}",
        ),
    ];
    for (body, id, shown) in attacks {
        let server = HostileServer::start(Hostile::Body(body)).await;
        let report = check(server.config().cases([id])).await;
        let evidence = &report.case(id).expect("case ran").evidence;
        // The attack did reach the report: the test is not vacuous.
        assert!(evidence.contains('\u{1b}'), "{id}: {evidence:?}");
        let table = report.table();
        assert_printable(&table);
        assert!(without_layout(&table).contains(shown), "{id}: {table:?}");
        let json = report.to_json();
        assert_printable(&json);
        let back: Report = serde_json::from_str(&json).expect("JSON report");
        assert_eq!(&back.case(id).expect("case").evidence, evidence, "lossless");
    }
}
