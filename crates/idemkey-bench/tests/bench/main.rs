//! `idemkey-bench` as a real process, starting the workspace's `idemkey` binary: the runs a
//! user makes, the proxy's workloads, and a hostile service it must survive.
#![allow(clippy::unwrap_used)]

mod hostile;
mod middleware;
mod proxy;
mod runs;
mod schema;

/// `idemkey-bench`, given the `idemkey` binary to start (`IDEMKEY_BIN`).
fn bench_command() -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_idemkey-bench"));
    command.env(
        "IDEMKEY_BIN",
        idemkey_test_support::process::binary::idemkey(),
    );
    command
}

fn main() -> std::process::ExitCode {
    idemkey_test_support::runner::trials::main()
}
