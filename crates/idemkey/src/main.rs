//! The `idemkey` binary.

fn main() {}
