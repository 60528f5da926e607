//! Every bar a ratio of the bench is held to, in one table: what is measured, the bar, and
//! where it comes from. The workloads never write a bar themselves: they name a row
//! ([`Id`]) and [`ratio`] compares the measured ratio with it. BENCHMARKS.md ("The targets")
//! reports the runs against these rows.

use crate::harness::report::Ratio;

/// How a measured ratio is compared with its bar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Compare {
    /// The ratio must be at least the bar.
    AtLeast,
    /// The ratio must be at most the bar.
    AtMost,
    /// A count that must equal the expected count: a correctness check, whose failure
    /// fails the run (exit 1). Its bar is 1, the share of the expected count.
    Equal,
}

/// A row of [`BARS`], named.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Id {
    CreateAtomicSqlite,
    CreateAtomicServer,
    CreateLeaseSqlite,
    CreateLeaseServer,
    CreateRedisRecords,
    ReplayAtomic,
    ReplayLeaseOrRedis,
    ReplayCached,
    StormOneNote,
    StormLoserP99,
    CeilingPostgresAtomic,
    LayerNoKey,
    Middleware,
    ProxyCreateSqlite,
    ProxyCreateServer,
    ProxyCreateRedis,
    ProxyReplay,
    Inbox,
    InboxOutbox,
}

/// One bar: what is measured, how it is compared, the bar, and why it is where it is.
// The code reads `compare` and `bar`; the rest is the table's documentation, for its
// readers, checked by the tests.
#[allow(dead_code)]
#[derive(Debug)]
pub(crate) struct Bar {
    /// The row's name, which is also its place in [`BARS`].
    pub(crate) id: Id,
    /// The ratio, numerator / denominator, and where it applies.
    pub(crate) measured: &'static str,
    /// How the ratio is compared with [`Bar::bar`].
    pub(crate) compare: Compare,
    /// The bar.
    pub(crate) bar: f64,
    /// Why the bar is there.
    pub(crate) why: &'static str,
}

/// Every bar, in the order of [`Id`].
pub(crate) const BARS: [Bar; 19] = [
    Bar {
        id: Id::CreateAtomicSqlite,
        measured: "create with key / without key (throughput), atomic mode, SQLite",
        compare: Compare::AtLeast,
        bar: 0.85,
        why: "one writer: the record's row adds little to the note's transaction",
    },
    Bar {
        id: Id::CreateAtomicServer,
        measured: "create with key / without key (throughput), atomic mode, PostgreSQL or MySQL",
        compare: Compare::AtLeast,
        bar: 0.70,
        why: "a second row in the note's transaction, and its index, against one row",
    },
    Bar {
        id: Id::CreateLeaseSqlite,
        measured: "create with key / without key (throughput), lease mode, SQLite",
        compare: Compare::AtLeast,
        bar: 0.50,
        why: "lease mode commits twice (the claim, then the note with the completion)",
    },
    Bar {
        id: Id::CreateLeaseServer,
        measured: "create with key / without key (throughput), lease mode, PostgreSQL or MySQL",
        compare: Compare::AtLeast,
        bar: 0.45,
        why: "two commits, each a round trip and a log flush on a server",
    },
    Bar {
        id: Id::CreateRedisRecords,
        measured: "create with key / without key (throughput), records in Redis (--records-url)",
        compare: Compare::AtLeast,
        bar: 0.8,
        why: "the claim and the completion are Redis round trips, cheaper than a commit",
    },
    Bar {
        id: Id::ReplayAtomic,
        measured: "replay / GET of the note (throughput), atomic mode, no replay cache",
        compare: Compare::AtLeast,
        bar: 1.0,
        why: "a replay reads one row, as the GET does",
    },
    Bar {
        id: Id::ReplayLeaseOrRedis,
        measured: "replay / GET of the note (throughput), lease mode or records in Redis",
        compare: Compare::AtLeast,
        bar: 0.9,
        why: "a lease-mode replay also reads the record's owner; Redis is a second store",
    },
    Bar {
        id: Id::ReplayCached,
        measured: "replay / GET of the note (throughput), with --replay-cache",
        compare: Compare::AtLeast,
        bar: 1.5,
        why: "a cached replay skips the database the GET still reads",
    },
    Bar {
        id: Id::StormOneNote,
        measured: "storm: keys with exactly one note / keys stormed",
        compare: Compare::Equal,
        bar: 1.0,
        why: "correctness: a key never makes two notes, however many clients send it",
    },
    Bar {
        id: Id::StormLoserP99,
        measured: "storm: loser p99 / single-request p99",
        compare: Compare::AtMost,
        bar: 5.0,
        why: "a duplicate waits for its winner's write, not for a timeout or a retry",
    },
    Bar {
        id: Id::CeilingPostgresAtomic,
        measured: "atomic create over HTTP / raw two-row transaction on PostgreSQL (throughput)",
        compare: Compare::AtLeast,
        bar: 0.75,
        why: "the service may cost a quarter of what the database alone allows",
    },
    Bar {
        id: Id::LayerNoKey,
        measured: "layer, no key: router with the layer / without it, in-process (throughput)",
        compare: Compare::AtLeast,
        bar: 0.97,
        why: "a request without a key pays at most 3 %, the noise of these pairs",
    },
    Bar {
        id: Id::Middleware,
        measured: "reqwest with the middleware / plain reqwest, keyed creates (median of pairs)",
        compare: Compare::AtLeast,
        bar: 0.97,
        why: "the client middleware costs at most 3 %, the noise of these pairs",
    },
    Bar {
        id: Id::ProxyCreateSqlite,
        measured: "proxy: keyed create / key-less create forwarded (throughput), SQLite records",
        compare: Compare::AtLeast,
        bar: 0.25,
        why: "a recorded create is two commits on one writer against a forward",
    },
    Bar {
        id: Id::ProxyCreateServer,
        measured: "proxy: keyed create / key-less create forwarded (throughput), PostgreSQL or MySQL",
        compare: Compare::AtLeast,
        bar: 0.30,
        why: "two commits on a server against a forward",
    },
    Bar {
        id: Id::ProxyCreateRedis,
        measured: "proxy: keyed create / key-less create forwarded (throughput), Redis records",
        compare: Compare::AtLeast,
        bar: 0.70,
        why: "two Redis round trips against a forward",
    },
    Bar {
        id: Id::ProxyReplay,
        measured: "proxy: replay / GET forwarded (throughput), any records",
        compare: Compare::AtLeast,
        bar: 1.0,
        why: "a replay is answered by the proxy without the API the GET goes to",
    },
    Bar {
        id: Id::Inbox,
        measured: "inbox / plain consumer (messages per second), same write, ack after the commit",
        compare: Compare::AtLeast,
        bar: 0.80,
        why: "a record row (and a lookup) in the write's transaction, against the write alone",
    },
    Bar {
        id: Id::InboxOutbox,
        measured: "inbox with outbox / plain consumer publishing after its commit (messages per second)",
        compare: Compare::AtLeast,
        bar: 0.70,
        why: "a record and an outbox row in the transaction, and the row's removal after the publish",
    },
];

/// The row `id`.
pub(crate) fn row(id: Id) -> &'static Bar {
    &BARS[id as usize]
}

/// The ratio `numerator / denominator` under `name`, held to the bar of row `id`.
pub(crate) fn ratio(id: Id, name: &str, numerator: f64, denominator: f64) -> Ratio {
    let bar = row(id);
    match bar.compare {
        Compare::AtLeast => Ratio::at_least(name, numerator, denominator, bar.bar),
        Compare::AtMost => Ratio::at_most(name, numerator, denominator, bar.bar),
        Compare::Equal => Ratio::exact(name, numerator, denominator),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_sits_at_its_id() {
        for (at, bar) in BARS.iter().enumerate() {
            assert_eq!(bar.id as usize, at, "{bar:?}");
            assert!(!bar.measured.is_empty() && !bar.why.is_empty(), "{bar:?}");
        }
    }

    #[test]
    fn the_rows_compare_as_they_say() {
        assert_eq!(ratio(Id::LayerNoKey, "x", 98.0, 100.0).met, Some(true));
        assert_eq!(ratio(Id::LayerNoKey, "x", 96.0, 100.0).met, Some(false));
        assert_eq!(ratio(Id::StormLoserP99, "x", 6.0, 1.0).met, Some(false));
        assert_eq!(ratio(Id::StormOneNote, "x", 3.0, 3.0).met, Some(true));
        assert_eq!(
            ratio(Id::ProxyCreateSqlite, "x", 1.0, 4.0).target,
            ">= 0.25"
        );
    }
}
