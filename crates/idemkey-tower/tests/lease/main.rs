//! Lease mode end to end: a real server on a socket, a real client, `MemoryStore`.
//!
//! Races are forced with signals the tests hold (a handler blocks until released; the store
//! reports its calls), never with sleeps, and nothing asserts on elapsed time.

mod common;
mod failures;
mod in_flight;
mod keys;
mod lost_reply;
mod plain_tower;
mod races;
mod replay;
