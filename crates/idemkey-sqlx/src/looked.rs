//! Atomic mode's lookup on its own, for a caller that answers what it decides before it starts
//! the work that may write (the tower layer answers a replay without spawning the task that
//! would hold a transaction).

use idemkey_core::{Answer, ClaimRequest, ExpiredLease, Result, decide};

use crate::{Backend, SqlxStore};

/// What the scope's record alone decides for a request, before any write.
#[derive(Debug)]
#[non_exhaustive]
pub enum Looked {
    /// The record decides: a replay, a mismatch, or a request in flight.
    Answer(Answer),
    /// No live record: the request executes. [`SqlxStore::execute`] may then skip its own
    /// lookup (`AtomicOptions::lookup = false`).
    Absent,
    /// A record whose claim is taken again (released, or an abandoned lease): only the
    /// execution's write decides.
    Undecided,
}

impl<DB: Backend> SqlxStore<DB> {
    /// Looks the request's scope up, the replay cache first, with no write and no
    /// transaction: the read [`SqlxStore::execute`] begins with when `AtomicOptions::lookup`
    /// is set.
    pub async fn look_up(
        &self,
        request: &ClaimRequest,
        on_expired: ExpiredLease,
    ) -> Result<Looked> {
        if let Some(record) = self.cached(&request.scope)
            && let Ok(answer) = decide(request, &record, on_expired).into_answer()
        {
            return Ok(Looked::Answer(answer));
        }
        let mut conn = self.conn().await?;
        let Some(record) = self.lookup_on(&mut conn, &request.scope).await? else {
            return Ok(Looked::Absent);
        };
        Ok(match decide(request, &record, on_expired).into_answer() {
            Ok(answer) => Looked::Answer(answer),
            Err(_) => Looked::Undecided,
        })
    }
}
