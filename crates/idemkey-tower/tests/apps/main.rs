//! The library's regression bed: small axum applications of the shapes users build (nested
//! tenant routers, extractors, auth, fallbacks, timeouts, CORS, compression, PostgreSQL),
//! served on real sockets over a real SQLite file or PostgreSQL, in both modes where they
//! apply. Each module is one application and what must hold for it.
#![allow(clippy::unwrap_used, unreachable_pub)]

mod bed;
mod errors;
mod external;
mod outer;
mod own_errors;
mod pg;
mod placement;
mod shutdown;
mod tenants;

fn main() -> std::process::ExitCode {
    idemkey_test_support::runner::trials::main()
}
