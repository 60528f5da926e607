//! The crate's error type: problems that stop a check before or outside its cases.

use std::{io, path::PathBuf};

/// Why a check could not run (usage or connection problems), as opposed to a case that failed.
///
/// The `idemkey check` command maps every variant to exit status 2.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A URL did not parse, or is not an `http://` URL.
    #[error("invalid URL {url:?}: {reason}")]
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A header line is not of the form `Name: value`, or names a header the checker sets itself.
    #[error("invalid header {line:?}: {reason}")]
    InvalidHeader {
        /// The header line as given.
        line: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A request body that must be JSON is not.
    #[error("{which} is not valid JSON: {source}")]
    InvalidJson {
        /// Which option: `--body`, `--alt-body` or `--invalid-body`.
        which: &'static str,
        /// The parse error.
        #[source]
        source: serde_json::Error,
    },
    /// The configuration is inconsistent (for example `--alt-body` equal to `--body`).
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// The server could not be reached before any case ran.
    #[error("cannot reach {addr}: {source}")]
    Connect {
        /// The `host:port` that was dialled.
        addr: String,
        /// The connection error.
        #[source]
        source: io::Error,
    },
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client: {0}")]
    Client(#[source] reqwest::Error),
    /// The JSON report could not be written.
    #[error("cannot write the report to {path}: {source}")]
    WriteReport {
        /// The report's path.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
}

/// A `Result` whose error defaults to this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
