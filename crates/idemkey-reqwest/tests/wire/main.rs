//! The middleware against a scripted server on a real socket, one test binary: which
//! requests are keyed (`keys`), the retry table row by row (`retries`), the waits and limits
//! (`limits`), servers not declared to honour keys (`hosts`), redirects (`redirects`),
//! streamed answers (`streams`), the retry budget (`budget`) and reqwest-retry around and
//! within the middleware (`compose`).

#![allow(clippy::unwrap_used)]

mod budget;
mod compose;
mod hosts;
mod keys;
mod limits;
mod metrics;
mod redirects;
mod retries;
mod streams;
mod support;
