//! Turns at a scope within one process: the building block with which stores and front ends
//! coalesce concurrent duplicates before they reach the store.
//!
//! A request that asks the store about its scope first takes this process's turn at it
//! ([`Turns::take`]). While it holds the turn, a duplicate arriving here need not send its own
//! read or claim (which could only queue behind the first one's and learn what it learns):
//! it follows the holder and wakes when the holder hands on a value, or when the turn ends
//! without one. What a turn hands on is the mode's choice: atomic mode hands on the record its
//! claim committed; lease mode hands on nothing and looks at what the turn left. The store
//! stays the arbiter: a follower that learns nothing from the turn asks it as if it had
//! never waited, and nothing here crosses a process.
//!
//! An exact duplicate (same fingerprint, same operation version) is told apart from another
//! request under the scope's key ([`Turn::Follow`], [`Turn::Other`]): whether the latter waits
//! is the caller's decision, since the store, not this process, decides between them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::watch;

use crate::{ClaimRequest, Fingerprint, Scope};

/// What an exact duplicate of a request shares with it: its fingerprint and its operation's
/// version (the scope is the rest of the request's identity).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    fingerprint: Fingerprint,
    version: String,
}

impl Identity {
    /// `request`'s identity.
    pub fn of(request: &ClaimRequest) -> Self {
        Self {
            fingerprint: request.fingerprint,
            version: request.operation.version().to_owned(),
        }
    }

    /// Whether `request`, of the same scope, is an exact duplicate of the request this is the
    /// identity of.
    pub fn matches(&self, request: &ClaimRequest) -> bool {
        self.fingerprint == request.fingerprint && self.version == request.operation.version()
    }
}

/// The scopes whose turn a request of this process holds, each with the channel its
/// followers wait on; `T` is what a holder may hand on to them.
#[derive(Debug)]
pub struct Turns<T> {
    held: Mutex<HashMap<Scope, Holder<T>>>,
}

/// The request holding a scope's turn: who it is and where it hands on.
#[derive(Debug)]
struct Holder<T> {
    identity: Identity,
    handed_on: watch::Receiver<Option<T>>,
}

/// Whose turn it is at a request's scope (see [`Turns::take`]).
#[derive(Debug)]
pub enum Turn<T> {
    /// No request held it: this one does now, until the guard drops.
    Lead(OwnTurn<T>),
    /// An exact duplicate holds it.
    Follow(Follower<T>),
    /// Another request under the scope's key (another fingerprint or operation version)
    /// holds it. Not a duplicate: wait on it only if what it hands on decides this one too.
    Other(Follower<T>),
}

/// A request's hold on its scope's turn, released (waking the followers) when dropped.
#[derive(Debug)]
pub struct OwnTurn<T> {
    turns: Arc<Turns<T>>,
    scope: Scope,
    handed_on: watch::Sender<Option<T>>,
}

/// A request waiting on the holder of its scope's turn.
#[derive(Debug)]
pub struct Follower<T>(watch::Receiver<Option<T>>);

impl<T> Default for Turns<T> {
    fn default() -> Self {
        Self {
            held: Mutex::default(),
        }
    }
}

impl<T> Turns<T> {
    fn held(&self) -> MutexGuard<'_, HashMap<Scope, Holder<T>>> {
        // A panic while the lock was held left the map as it was: go on with it.
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the turn at `request`'s scope if no request holds it, or tells who does.
    pub fn take(self: &Arc<Self>, request: &ClaimRequest) -> Turn<T> {
        let mut held = self.held();
        // Subscribing under the lock: a holder that lets go right after still wakes us.
        if let Some(holder) = held.get(&request.scope) {
            let follower = Follower(holder.handed_on.clone());
            return if holder.identity.matches(request) {
                Turn::Follow(follower)
            } else {
                Turn::Other(follower)
            };
        }
        let (handed_on, receiver) = watch::channel(None);
        let holder = Holder {
            identity: Identity::of(request),
            handed_on: receiver,
        };
        held.insert(request.scope.clone(), holder);
        Turn::Lead(OwnTurn {
            turns: self.clone(),
            scope: request.scope.clone(),
            handed_on,
        })
    }

    /// Follows whichever request holds `scope`'s turn, if one does, without taking the turn
    /// when none does.
    pub fn follow(&self, scope: &Scope) -> Option<Follower<T>> {
        let held = self.held();
        held.get(scope)
            .map(|holder| Follower(holder.handed_on.clone()))
    }

    /// Whether a request holds `scope`'s turn now.
    pub fn is_taken(&self, scope: &Scope) -> bool {
        self.held().contains_key(scope)
    }
}

impl<T> OwnTurn<T> {
    /// Hands `value` to the followers, now and later ones alike; the turn is still held.
    pub fn hand_on(&self, value: T) {
        self.handed_on.send_replace(Some(value));
    }
}

impl<T> Drop for OwnTurn<T> {
    fn drop(&mut self) {
        // The scope's holder is this one: a turn is taken only while none is held. The
        // sender drops after it, which wakes every follower.
        self.turns.held().remove(&self.scope);
    }
}

impl<T: Clone> Follower<T> {
    /// Waits until the holder hands on a value, then that value (even if it came before this
    /// follower came); `None` once its turn ended without a value.
    pub async fn handed_on(&mut self) -> Option<T> {
        loop {
            if let Some(value) = self.0.borrow_and_update().clone() {
                return Some(value);
            }
            // An error only once the sender is gone with no value unseen.
            if self.0.changed().await.is_err() {
                return None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    use super::*;
    use crate::Operation;
    use crate::testkit::request_for;

    fn turns() -> Arc<Turns<u32>> {
        Arc::default()
    }

    /// A request of the one scope these tests share.
    fn request(body: &str) -> ClaimRequest {
        request_for("actor", "create-note", body)
    }

    fn lead(turns: &Arc<Turns<u32>>, request: &ClaimRequest) -> OwnTurn<u32> {
        let Turn::Lead(turn) = turns.take(request) else {
            panic!("the scope's turn is free");
        };
        turn
    }

    /// Polls once: `Pending` means the follower is still waiting.
    fn poll_once<F: Future>(future: std::pin::Pin<&mut F>) -> Poll<F::Output> {
        future.poll(&mut Context::from_waker(Waker::noop()))
    }

    #[tokio::test]
    async fn a_duplicate_follows_until_the_holder_hands_on() {
        let turns = turns();
        let first = lead(&turns, &request("{}"));
        let Turn::Follow(mut follower) = turns.take(&request("{}")) else {
            panic!("an exact duplicate follows");
        };
        let mut waiting = pin!(follower.handed_on());
        assert!(poll_once(waiting.as_mut()).is_pending(), "it waits");
        first.hand_on(7);
        assert_eq!(waiting.await, Some(7));
        assert!(turns.is_taken(&request("{}").scope), "held until dropped");
    }

    #[tokio::test]
    async fn a_follower_that_comes_after_the_value_gets_it() {
        let turns = turns();
        let first = lead(&turns, &request("{}"));
        first.hand_on(7);
        let mut follower = turns.follow(&request("{}").scope).unwrap();
        assert_eq!(follower.handed_on().await, Some(7));
    }

    #[tokio::test]
    async fn a_holder_dropped_without_handing_on_wakes_its_followers_with_nothing() {
        let turns = turns();
        let first = lead(&turns, &request("{}"));
        let Turn::Follow(mut follower) = turns.take(&request("{}")) else {
            panic!("an exact duplicate follows");
        };
        let mut waiting = pin!(follower.handed_on());
        assert!(poll_once(waiting.as_mut()).is_pending(), "it waits");
        drop(first);
        assert_eq!(waiting.await, None);
        assert!(!turns.is_taken(&request("{}").scope));
        let _next = lead(&turns, &request("{}"));
    }

    #[test]
    fn a_different_fingerprint_or_version_is_not_a_duplicate_and_waits_for_nothing() {
        let turns = turns();
        let _first = lead(&turns, &request("{}"));
        let other_body = request("{\"other\":true}");
        assert!(matches!(turns.take(&other_body), Turn::Other(_)));
        let mut other_version = request("{}");
        other_version.operation = Operation::new("create-note", "v2");
        assert!(matches!(turns.take(&other_version), Turn::Other(_)));
        let elsewhere = request_for("another-actor", "create-note", "{}");
        assert!(
            matches!(turns.take(&elsewhere), Turn::Lead(_)),
            "another scope"
        );
    }
}
