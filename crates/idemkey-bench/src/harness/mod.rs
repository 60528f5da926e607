//! What every workload runs on, and nothing of any workload: the command line ([`args`]),
//! the HTTP client ([`client`]), rounds and workers ([`runner`]), histograms ([`stats`]),
//! CPU times ([`cpu`]), tables and JSON ([`report`]), and the bounds that keep a hostile
//! service (`--url`) from growing the bench's memory, hanging it ([`limits`], [`listing`])
//! or writing to the terminal through it ([`printable`]).

pub(crate) mod args;
pub(crate) mod client;
pub(crate) mod cpu;
pub(crate) mod limits;
pub(crate) mod listing;
pub(crate) mod printable;
pub(crate) mod report;
pub(crate) mod runner;
pub(crate) mod stats;
