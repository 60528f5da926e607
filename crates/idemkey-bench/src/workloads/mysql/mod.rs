//! MySQL only: the statements of a keyed create without HTTP ([`statements`]), and the
//! server's counters per side ([`dbstatus`]), which the HTTP workloads note too.

pub(crate) mod dbstatus;
pub(crate) mod statements;
