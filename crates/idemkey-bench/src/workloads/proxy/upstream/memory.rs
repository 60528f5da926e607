//! The in-memory upstream's notes: a bounded ring under a mutex, as little as an API can do,
//! so that what a request through the proxy costs more than one straight to it is the
//! proxy's.

use std::sync::{Mutex, PoisonError};

use bytes::Bytes;

use super::shown;

/// The most notes kept: past it the oldest are dropped (about 150 MiB of the bench's
/// memory at most). Only the replay workload reads a note back, the one it has just made.
const MAX_NOTES: usize = 1 << 20;

/// The notes, by id: note `id` is at `(id - 1) % MAX_NOTES` while it is kept.
#[derive(Default)]
pub(super) struct Notes {
    ring: Mutex<Ring>,
}

#[derive(Default)]
struct Ring {
    /// `(id, answer body)`.
    notes: Vec<(u64, Bytes)>,
    last: u64,
}

impl Notes {
    /// Keeps `body` (JSON) as a new note; its id and the answer that shows it.
    pub(super) fn insert(&self, body: &[u8]) -> (u64, Bytes) {
        let mut ring = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
        ring.last += 1;
        let id = ring.last;
        let answer = shown(id, body);
        let at = slot(id);
        if at < ring.notes.len() {
            ring.notes[at] = (id, answer.clone());
        } else {
            ring.notes.push((id, answer.clone()));
        }
        (id, answer)
    }

    /// The answer that shows note `id`, while it is kept.
    pub(super) fn get(&self, id: u64) -> Option<Bytes> {
        if id == 0 {
            return None;
        }
        let ring = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
        let (kept, answer) = ring.notes.get(slot(id))?;
        (*kept == id).then(|| answer.clone())
    }
}

fn slot(id: u64) -> usize {
    ((id - 1) % MAX_NOTES as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_notes_go_past_the_bound() {
        let notes = Notes::default();
        assert_eq!(slot(1), 0);
        assert_eq!(slot(MAX_NOTES as u64 + 1), 0);
        let (first, _) = notes.insert(b"1");
        assert!(notes.get(first).is_some() && notes.get(0).is_none());
        notes.ring.lock().unwrap().last = MAX_NOTES as u64;
        let (wrapped, _) = notes.insert(b"2");
        assert_eq!(slot(wrapped), slot(first));
        assert!(notes.get(first).is_none() && notes.get(wrapped).is_some());
    }
}
