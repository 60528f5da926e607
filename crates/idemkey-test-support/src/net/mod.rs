//! HTTP/1.1 and other protocols on raw sockets: requests written by hand, storms of them,
//! relays that hold, lose or cut what passes through, and load generators.

#[cfg(feature = "http")]
pub mod load;
pub mod lossy;
pub mod raw;
pub mod relay;
pub mod sockets;
pub mod storm;
