//! `idemkey check` against `idemkey serve`, in both modes: every case passes.

use idemkey_test_support::process::notes;
use idemkey_test_support::process::serve::Serve;

use crate::{IDEMKEY, idemkey};

fn check_passes(mode: &str) {
    let dir = tempfile::tempdir().unwrap();
    let server = Serve::sqlite(IDEMKEY, &dir.path().join("notes.db"), &["--mode", mode]);
    notes::check_passes(&server);
}

#[idemkey_test_support::test]
fn atomic_mode_passes_every_case() {
    check_passes("atomic");
}

#[idemkey_test_support::test]
fn lease_mode_passes_every_case() {
    check_passes("lease");
}

#[idemkey_test_support::test]
fn an_unreachable_api_is_exit_2() {
    let out = idemkey(&[
        "check",
        "http://127.0.0.1:9/v1/notes",
        "--body",
        "{}",
        "--alt-body",
        "[]",
    ]);
    assert_eq!(out.status.code(), Some(2));
}
