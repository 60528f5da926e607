//! The middleware against a scripted server on a real socket, one test binary: which
//! requests are keyed (`keys`), the retry table row by row (`retries`), and the waits and
//! limits (`limits`).

#![allow(clippy::unwrap_used)]

mod keys;
mod limits;
mod metrics;
mod retries;
mod support;
