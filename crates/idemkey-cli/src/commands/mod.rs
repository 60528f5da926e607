//! The commands: each module holds its command's arguments beside its run.

pub(crate) mod maintenance;
pub(crate) mod proxy;
pub(crate) mod send;
pub(crate) mod serve;
