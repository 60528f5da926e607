//! The test runner: tests registered with what they need, counted as ignored where a need is
//! missing, run and failed instead under CI.

pub mod needs;
pub mod rng;
pub mod trials;
