//! `idemkey check` against the actix service, in both modes: every case passes, as against
//! `idemkey serve`.

use idemkey_test_support::process::notes::check_passes;
use idemkey_test_support::process::serve::Serve;

use crate::ACTIX_NOTES;

fn check(mode: &str) {
    let dir = tempfile::tempdir().unwrap();
    let server = Serve::sqlite(ACTIX_NOTES, &dir.path().join("notes.db"), &["--mode", mode]);
    check_passes(&server);
}

#[idemkey_test_support::test]
fn atomic_mode_passes_every_case() {
    check("atomic");
}

#[idemkey_test_support::test]
fn lease_mode_passes_every_case() {
    check("lease");
}
