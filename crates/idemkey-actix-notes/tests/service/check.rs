//! `idemkey check` against the actix service, in both modes: every case passes, as against
//! `idemkey serve`.

use idemkey_test_support::process::serve::Serve;

use crate::{ACTIX_NOTES, idemkey};

fn check_passes(mode: &str) {
    let dir = tempfile::tempdir().unwrap();
    let server = Serve::sqlite(ACTIX_NOTES, &dir.path().join("notes.db"), &["--mode", mode]);
    let report = dir.path().join("report.json");
    let url = server.url("/v1/notes");
    let out = idemkey(&[
        "check",
        &url,
        "--body",
        r#"{"title": "hello"}"#,
        "--alt-body",
        r#"{"title": "other"}"#,
        "-H",
        "Authorization: Bearer alice-secret",
        "--actor2-header",
        "Authorization: Bearer bob-secret",
        "--list",
        "/v1/notes",
        "--invalid-body",
        r#"{"title": ""}"#,
        "--json",
        report.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let cases = report["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 10);
    assert!(cases.iter().all(|c| c["verdict"] == "pass"), "{stdout}");
}

#[idemkey_test_support::test]
fn atomic_mode_passes_every_case() {
    check_passes("atomic");
}

#[idemkey_test_support::test]
fn lease_mode_passes_every_case() {
    check_passes("lease");
}
