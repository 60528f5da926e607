//! The external service a handler calls: it deduplicates calls by their idempotency key, as
//! payment and e-mail providers do, and keeps every effect it made.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::world::lock;

/// One effect: its number and the record whose derived key made it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Effect {
    pub(crate) id: u64,
    pub(crate) record: u32,
}

/// The deduplicating external service.
#[derive(Debug, Default)]
pub(crate) struct External {
    /// By derived key; only looked up, so the random keys never order anything.
    effects: Mutex<HashMap<String, Effect>>,
}

impl External {
    /// Makes the effect of `key`, or returns the one it made before; `true` if made now.
    pub(crate) fn call(&self, key: &str, record: u32) -> (Effect, bool) {
        let mut effects = lock(&self.effects);
        if let Some(effect) = effects.get(key) {
            return (*effect, false);
        }
        let id = effects.len() as u64 + 1;
        let effect = Effect { id, record };
        effects.insert(key.to_owned(), effect);
        (effect, true)
    }
}
