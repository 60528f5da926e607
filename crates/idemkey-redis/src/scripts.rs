//! The store's scripts, loaded once: `lua/common.lua` put before each `lua/<name>.lua`.
//!
//! [`redis::Script`] sends `EVALSHA` and loads the script on a `NOSCRIPT` miss, so a server
//! that restarted or a cluster node that never saw the script is served all the same.

use std::sync::LazyLock;

use redis::Script;

/// Every script of the store, one per operation.
pub(crate) struct Scripts {
    pub(crate) lookup: Script,
    /// The lookup of the replay cache, which also returns the time the record has left.
    pub(crate) cached: Script,
    pub(crate) claim: Script,
    pub(crate) reclaim: Script,
    pub(crate) complete: Script,
    /// The mark of a completion whose wait is done (`lua/durable.lua`).
    pub(crate) durable: Script,
    pub(crate) release: Script,
    pub(crate) discard: Script,
    pub(crate) extend: Script,
    pub(crate) forget: Script,
    /// An owner's heartbeat (behaviour §8a).
    pub(crate) beat: Script,
    /// An actor's ledger under per-actor caps in a cluster, where the record's scripts cannot
    /// reach it (`lua/ledger.lua`): a record about to be claimed enters it, and each change
    /// of a record is followed in it. On a standalone server the record's scripts keep it.
    pub(crate) admit: Script,
    pub(crate) note: Script,
}

const COMMON: &str = include_str!("../lua/common.lua");
const LEDGER: &str = include_str!("../lua/ledger.lua");

/// A script with its shebang and the shared helpers. The shebang (Redis 7) makes the server
/// refuse a writing script up front when it is out of memory, instead of failing at its first
/// write; `no-writes` lets a reading one run even then.
fn script(flags: &str, body: &str) -> Script {
    Script::new(&format!("#!lua{flags}\n{COMMON}\n{body}"))
}

/// A writing script that may keep an actor's ledger: the ledger's helpers put before it.
fn ledgered(body: &str) -> Script {
    script("", &format!("{LEDGER}\n{body}"))
}

static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    lookup: script(" flags=no-writes", include_str!("../lua/lookup.lua")),
    cached: script(" flags=no-writes", include_str!("../lua/cached.lua")),
    claim: ledgered(include_str!("../lua/claim.lua")),
    reclaim: ledgered(include_str!("../lua/reclaim.lua")),
    complete: ledgered(include_str!("../lua/complete.lua")),
    durable: script("", include_str!("../lua/durable.lua")),
    release: ledgered(include_str!("../lua/release.lua")),
    discard: ledgered(include_str!("../lua/discard.lua")),
    extend: ledgered(include_str!("../lua/extend.lua")),
    forget: ledgered(include_str!("../lua/forget.lua")),
    beat: script("", include_str!("../lua/beat.lua")),
    admit: ledgered(include_str!("../lua/admit.lua")),
    note: ledgered(include_str!("../lua/note.lua")),
});

/// The scripts, hashed once per process.
pub(crate) fn scripts() -> &'static Scripts {
    &SCRIPTS
}
