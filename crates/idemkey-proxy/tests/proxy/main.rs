//! The proxy's tests, in one binary.
//!
//! - [`library`]: the proxy as a library in front of a counting upstream: replays, routes,
//!   an unreachable upstream, configuration errors;
//! - [`hostile`]: the proxy, in process, between a hostile upstream and a hostile client:
//!   framing, forwarding headers, paths, credentials, caps, slow bodies;
//! - [`process`]: `idemkey proxy` as users run it, a real process (the workspace's `idemkey`
//!   binary, `binary::idemkey`) in front of a Python upstream or one the test runs: the seed's
//!   cases, storms, restarts, outages, owners' heartbeats, clocks and power loss.
//!
//! A test whose server or program (PostgreSQL, Redis, `python3`, root, FUSE, libfaketime) is
//! missing is ignored locally, and fails when `CI` is set (`idemkey_test_support::runner`).
#![allow(clippy::unwrap_used)]

mod hostile;
mod in_process;
mod library;
mod process;

fn main() -> std::process::ExitCode {
    idemkey_test_support::runner::trials::main()
}
