//! Atomic mode's lookup on its own, for a caller that answers what it decides before it starts
//! the work that may write (the tower layer answers a replay without spawning the task that
//! would hold a transaction).

use idemkey_core::{Answer, ClaimRequest, ExpiredLease, Record, Result, decide};

use crate::{Backend, SqlxStore};

/// What the scope's record alone decides for a request, before any write.
#[derive(Debug)]
#[non_exhaustive]
pub enum AtomicLookup {
    /// The record decides: a replay, a mismatch, or a request in flight.
    Answer(Answer),
    /// No live record: the request executes. [`SqlxStore::execute`] may then skip its own
    /// lookup (`AtomicOptions::lookup = false`).
    Absent,
    /// Only the execution decides: the record's claim is taken again (released, or an
    /// abandoned lease), or another request of this process has its turn on the scope (the
    /// execution waits for it; the lookup was not made).
    Undecided,
}

impl<DB: Backend> SqlxStore<DB> {
    /// Looks the request's scope up, the replay cache first, with no write and no
    /// transaction: the read [`SqlxStore::execute`] begins with when `AtomicOptions::lookup`
    /// is set.
    pub async fn lookup_atomic(
        &self,
        request: &ClaimRequest,
        on_expired: ExpiredLease,
    ) -> Result<AtomicLookup> {
        if let Some(answer) = self.cached_answer(request, on_expired) {
            return Ok(AtomicLookup::Answer(answer));
        }
        // A duplicate of a request this process is claiming: the execution waits for that
        // one's answer, which makes this read redundant.
        if let Some(local) = &self.local
            && local.is_taken(&request.scope)
        {
            return Ok(AtomicLookup::Undecided);
        }
        let record = self.lookup_kept(&request.scope).await?;
        Ok(decided(record, request, on_expired))
    }

    /// What the replay cache's copy of the scope's record decides, if there is one and it
    /// decides.
    pub(crate) fn cached_answer(
        &self,
        request: &ClaimRequest,
        on_expired: ExpiredLease,
    ) -> Option<Answer> {
        let record = self.cached(&request.scope)?;
        decide(request, &record, on_expired).into_answer().ok()
    }

    /// [`Self::lookup_atomic`]'s database read and decision, on `conn`.
    pub(crate) async fn lookup_atomic_on(
        &self,
        conn: &mut DB::Connection,
        request: &ClaimRequest,
        on_expired: ExpiredLease,
    ) -> Result<AtomicLookup> {
        let record = self.lookup_on(conn, &request.scope).await?;
        Ok(decided(record, request, on_expired))
    }
}

/// What the scope's live record, if any, decides for `request` before any write.
fn decided(
    record: Option<Record>,
    request: &ClaimRequest,
    on_expired: ExpiredLease,
) -> AtomicLookup {
    let Some(record) = record else {
        return AtomicLookup::Absent;
    };
    match decide(request, &record, on_expired).into_answer() {
        Ok(answer) => AtomicLookup::Answer(answer),
        Err(_) => AtomicLookup::Undecided,
    }
}
