//! The reference: what the store must hold, replayed from the calls it applied, on the true
//! clock. Every call is checked against it before it is applied to it.

use std::collections::HashMap;

use crate::Property;
use crate::history::{Answer, Applied, Exec, OpKind, Seen, SeenState};

#[derive(Clone, Debug)]
enum State {
    InFlight { until: u64 },
    Released,
    Completed(Answer),
}

#[derive(Clone, Debug)]
struct Row {
    record: u32,
    token: i64,
    state: State,
    expires: u64,
    lease: u64,
    retention: u64,
}

/// One call against the reference: when, what, on which scope, under which claim.
pub(crate) struct Applies<'a> {
    pub(crate) at: u64,
    pub(crate) op: OpKind,
    pub(crate) scope: Option<&'a str>,
    pub(crate) claim: Option<Exec>,
    pub(crate) applied: &'a Applied,
}

/// A broken promise: which, and what happened.
pub(crate) type Broken = (Property, String);

/// The records the store must hold, by scope (only looked up, and swept as a whole).
#[derive(Debug, Default)]
pub(crate) struct Reference {
    rows: HashMap<String, Row>,
}

impl Reference {
    /// The live record of `scope` at `at`, if any: `(record, completed answer)`.
    pub(crate) fn live(&self, scope: &str, at: u64) -> Option<u32> {
        self.rows
            .get(scope)
            .filter(|row| row.expires > at)
            .map(|row| row.record)
    }

    /// Checks one applied call, then applies it.
    pub(crate) fn apply(&mut self, call: &Applies<'_>) -> Result<(), Broken> {
        let scope = call.scope.unwrap_or_default();
        match call.applied {
            Applied::Claimed {
                exec,
                lease_ms,
                retention_ms,
            } => self.claimed(scope, call.at, *exec, (*lease_ms, *retention_ms)),
            Applied::Reclaimed {
                exec,
                lease_ms,
                retention_ms,
            } => self.reclaimed(scope, call.at, *exec, (*lease_ms, *retention_ms)),
            Applied::Read(Some(seen)) => self.read(scope, call.at, seen),
            Applied::Settled { stored } => self.settled(call, scope, stored.as_ref()),
            Applied::Swept(_) => {
                self.rows.retain(|_, row| row.expires > call.at);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn claimed(
        &mut self,
        scope: &str,
        at: u64,
        exec: Exec,
        times: (u64, u64),
    ) -> Result<(), Broken> {
        if let Some(old) = self.rows.get(scope).filter(|row| row.expires > at) {
            let what = format!(
                "{scope}: record {} claimed while record {} ({:?}) lives until {} ms",
                exec.record, old.record, old.state, old.expires
            );
            let property = match old.state {
                State::Completed(_) => Property::AckLost,
                _ => Property::DoubleExecution,
            };
            return Err((property, what));
        }
        self.rows
            .insert(scope.to_owned(), Row::claimed(exec, at, times));
        Ok(())
    }

    fn reclaimed(
        &mut self,
        scope: &str,
        at: u64,
        exec: Exec,
        times: (u64, u64),
    ) -> Result<(), Broken> {
        let Some(row) = self.rows.get(scope) else {
            return Err((
                Property::DoubleExecution,
                format!("{scope}: reclaimed a record the store had deleted"),
            ));
        };
        if row.record != exec.record || row.token + 1 != exec.token {
            let what = format!(
                "{scope}: reclaimed as {exec:?}, but the record is {} at token {}",
                row.record, row.token
            );
            return Err((Property::DoubleExecution, what));
        }
        if let State::InFlight { until } = row.state
            && until > at
        {
            let what = format!(
                "{scope}: record {} taken over as token {} while token {}'s lease runs until {until} ms",
                exec.record, exec.token, row.token
            );
            return Err((Property::DoubleExecution, what));
        }
        self.rows
            .insert(scope.to_owned(), Row::claimed(exec, at, times));
        Ok(())
    }

    fn read(&self, scope: &str, at: u64, seen: &Seen) -> Result<(), Broken> {
        let row = self.rows.get(scope).filter(|row| row.expires > at);
        let lease_left = match seen.state {
            SeenState::InFlight { lease_left_ms } => lease_left_ms,
            _ => 0,
        };
        let ended = match row {
            Some(row) if row.record == seen.exec.record => match &row.state {
                State::InFlight { until } => *until <= at,
                State::Completed(stored) => {
                    if let SeenState::Completed(read) = &seen.state
                        && read != stored
                    {
                        let what = format!(
                            "{scope}: record {} read as {read:?}, stored {stored:?}",
                            row.record
                        );
                        return Err((Property::ReplayMismatch, what));
                    }
                    false
                }
                State::Released => false,
            },
            Some(_) => false,
            None => true,
        };
        if lease_left > 0 && ended {
            let what = format!(
                "{scope}: record {} read in flight with {lease_left} ms of lease left after its lease ended",
                seen.exec.record
            );
            return Err((Property::StuckClaim, what));
        }
        Ok(())
    }

    fn settled(
        &mut self,
        call: &Applies<'_>,
        scope: &str,
        stored: Option<&Answer>,
    ) -> Result<(), Broken> {
        let at = call.at;
        let exec = call.claim.unwrap_or(Exec {
            record: u32::MAX,
            token: 0,
        });
        let Some(row) = self.rows.get_mut(scope) else {
            return Err((
                Property::StaleOwner,
                format!(
                    "{scope}: {:?} by {exec:?} after the record was deleted",
                    call.op
                ),
            ));
        };
        let held = row.record == exec.record && row.token == exec.token;
        if !held || !matches!(row.state, State::InFlight { .. }) {
            let what = format!(
                "{scope}: {:?} by {exec:?} applied while the record is {} at token {} ({:?})",
                call.op, row.record, row.token, row.state
            );
            return Err((Property::StaleOwner, what));
        }
        match call.op {
            OpKind::Complete => {
                let answer = stored.cloned().unwrap_or(Answer {
                    status: 0,
                    body: String::new(),
                });
                row.state = State::Completed(answer);
                row.expires = at + row.retention;
            }
            OpKind::Release => {
                row.state = State::Released;
                row.expires = at + row.retention;
            }
            OpKind::Extend => {
                row.state = State::InFlight {
                    until: at + row.lease,
                };
                row.expires = at + row.lease + row.retention;
            }
            _ => {
                self.rows.remove(scope);
            }
        }
        Ok(())
    }
}

impl Row {
    fn claimed(exec: Exec, at: u64, (lease, retention): (u64, u64)) -> Self {
        Self {
            record: exec.record,
            token: exec.token,
            state: State::InFlight { until: at + lease },
            expires: at + lease + retention,
            lease,
            retention,
        }
    }
}
