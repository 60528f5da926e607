//! A black-box conformance checker for any HTTP API's idempotency keys.
//!
//! It drives a live create endpoint the way unlucky clients do — retrying, losing responses,
//! reusing keys with other bodies or other credentials, firing concurrent duplicates — and
//! reports, case by case, whether the API kept its promise: one request, one resource, and the
//! same answer on every retry.
//!
//! | case | what must hold |
//! | --- | --- |
//! | `replay` | an identical retry gets the same status and body |
//! | `replay-fidelity` | …and the same `Location`, `Content-Type` and body bytes |
//! | `json-equivalence` | reordered, re-spaced JSON is the same request |
//! | `lost-response` | a request sent and abandoned, then retried, makes one resource |
//! | `mismatch` | the same key with another body is rejected (422), creating nothing |
//! | `cross-actor` | the same key under another actor is another request |
//! | `concurrent-burst` | N duplicates released together make one resource |
//! | `failure-not-stored` | a rejected request leaves its key unused |
//! | `missing-key` | no key → 400 (skipped when the API does not require keys) |
//! | `invalid-keys` | empty, over 255 characters or control characters → 400 |
//!
//! Resources are counted by the `id` field of JSON responses (else `Location`) and, with a list
//! endpoint, by the ids it lists before and after. Only `http://` is supported: the lost-response
//! and burst cases write HTTP/1.1 by hand on raw sockets.
//!
//! # Example
//!
//! ```no_run
//! use idemkey_check::{CheckConfig, Checker, Verdict};
//!
//! # async fn demo() -> idemkey_check::Result<()> {
//! let config = CheckConfig::new(
//!     "http://127.0.0.1:8080/v1/notes",
//!     r#"{"title":"buy milk"}"#,
//!     r#"{"title":"buy bread"}"#,
//! )?
//! .header("Authorization: Bearer s1")?
//! .actor2_header("Authorization: Bearer s2")?
//! .list_url("/v1/notes")?
//! .invalid_body(r#"{"title":""}"#);
//!
//! let report = Checker::new(config)?.run().await?;
//! println!("{}", report.table());
//! assert!(report.cases.iter().all(|case| case.verdict != Verdict::Fail));
//! # Ok(())
//! # }
//! ```
//!
//! # Limits
//!
//! - The checker creates real resources on the target API (a few dozen per run): point it at a
//!   test deployment, not production.
//! - `http://` only; the list endpoint is read as one page (pagination is not followed).
//! - In `lost-response`, a client that hangs up right after sending may lead the server to drop
//!   the request (hyper-based servers often do); the case then checks that the retry still
//!   converges. A second client hangs up only once the response starts to arrive, which is the
//!   lost-response scenario proper.
//! - The checker does not trust the server. Every response body is read up to
//!   [`MAX_BODY_BYTES`] (16 MiB), every request is bounded by [`CheckConfig::timeout()`] (connect,
//!   send and the whole body), and a malformed response (a chunk size past the limit, say)
//!   fails its case as a request error. Control characters, escape sequences and bidirectional
//!   overrides in what the server sent are shown escaped (`\u{1b}`) in [`Report::table`], and
//!   written as `\uXXXX` escapes in [`Report::to_json`], so a server cannot drive the terminal.
//! - The burst makes requests concurrent on the wire (each holds back its last byte until all
//!   are ready), not by timing; whether they overlap inside the server is up to the server, so
//!   a pass means no duplicate in this burst, not a proof that none can occur.
//!
//! The `idemkey check` command is [`CheckArgs`] (a `clap::Args`) and [`run`], which prints the
//! table and returns the exit status: 0 when no case failed, 1 when one did, 2 on a usage or
//! connection error.

mod args;
mod case;
mod cases;
mod checker;
mod config;
mod context;
mod error;
mod exchange;
mod limits;
mod printable;
mod raw;
mod report;
mod resources;

pub use args::{CheckArgs, run};
pub use case::CaseId;
pub use checker::Checker;
pub use config::{CheckConfig, parse_header};
pub use error::{Error, Result};
pub use limits::MAX_BODY_BYTES;
pub use printable::printable;
pub use report::{CaseReport, CheckStatus, Report, Summary, Verdict};
