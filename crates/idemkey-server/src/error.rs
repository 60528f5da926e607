//! The error of opening a store: each message names what could not be opened, with its URL
//! redacted, and leaves the cause to [`std::error::Error::source`].

use std::path::PathBuf;

/// What can go wrong opening a store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The database URL is not SQLite's, PostgreSQL's or MySQL's.
    #[error("unsupported database URL {url}: use sqlite://FILE, postgres://... or mysql://...")]
    UnsupportedDatabase {
        /// The URL, redacted.
        url: String,
    },
    /// The records URL is not a Redis one.
    #[error(
        "unsupported records URL {url}: use redis://HOST:PORT[/DB] or redis+cluster://HOST:PORT,..."
    )]
    UnsupportedRecords {
        /// The URL, redacted.
        url: String,
    },
    /// The database could not be opened or migrated.
    #[error("cannot open the database at {url}")]
    Database {
        /// The URL, redacted.
        url: String,
        /// Why.
        #[source]
        source: idemkey_core::Error,
    },
    /// The Redis records could not be reached, or cannot wait as asked.
    #[error("cannot connect to the records at {url}")]
    Records {
        /// The URL, redacted.
        url: String,
        /// Why.
        #[source]
        source: idemkey_core::Error,
    },
    /// The CA certificate file could not be read.
    #[error("cannot read --records-tls-ca {}", path.display())]
    TlsCa {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// A result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
