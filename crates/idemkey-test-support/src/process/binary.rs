//! The `idemkey` binary for tests of other packages, which cargo gives no
//! `CARGO_BIN_EXE_idemkey`: the bench's tests start it through `idemkey-bench --idemkey`.

use std::path::PathBuf;

/// The variable that names the `idemkey` binary to test, overriding the one built beside the
/// running test.
pub const IDEMKEY_BIN_ENV: &str = "IDEMKEY_BIN";

/// The `idemkey` binary: [`IDEMKEY_BIN_ENV`] if set, else the one built in the running test's
/// target directory and profile (`cargo test --workspace` builds it before any test runs).
/// Missing: the test fails, saying how to build it.
pub fn idemkey() -> PathBuf {
    if let Some(path) = std::env::var_os(IDEMKEY_BIN_ENV) {
        return PathBuf::from(path);
    }
    beside_test("idemkey", "idemkey-cli")
}

/// The binary `name` of the workspace's package `package`, built in the running test's target
/// directory and profile (`cargo test --workspace` builds every binary before any test runs):
/// for tests that start another package's program (`idemkey-actix-notes`). Missing: the test
/// fails, saying how to build it.
pub fn beside_test(name: &str, package: &str) -> PathBuf {
    // A test runs from `<target>/<profile>/deps/`; the binaries sit in `<target>/<profile>/`.
    let test = std::env::current_exe().unwrap();
    let path = test
        .parent()
        .and_then(|deps| deps.parent())
        .map(|profile| profile.join(format!("{name}{}", std::env::consts::EXE_SUFFIX)))
        .unwrap();
    assert!(
        path.is_file(),
        "no {name} binary at {}: run the tests with `cargo test --workspace` or build it with \
         `cargo build -p {package}`",
        path.display()
    );
    path
}
