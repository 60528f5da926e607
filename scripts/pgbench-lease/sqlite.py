#!/usr/bin/env python3
"""Atomic and lease mode's commit patterns on SQLite, without HTTP or Rust, in
WAL mode with synchronous=FULL (as idemkey opens its files), one writer, N transactions
each, alternated over rounds. Prints transactions per second and the ratio to the key-less
pattern:

    base                   BEGIN IMMEDIATE; note; COMMIT
    commit_time_nolookup   BEGIN IMMEDIATE; note; completed record; COMMIT
    commit_time            lookup (on a second connection, as idemkey's readers); then the same
    lease_today            claim (committed); note (committed); completion (committed)
    lease_folded           claim (committed); BEGIN IMMEDIATE; note; completion; COMMIT

    scripts/pgbench-lease/sqlite.py [transactions] [rounds] [dir]
"""
import os
import sqlite3
import sys
import tempfile
import time

N = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
DIR = sys.argv[3] if len(sys.argv) > 3 else tempfile.mkdtemp(prefix="sqlite-lease-")
os.makedirs(DIR, exist_ok=True)

FP = bytes(range(32))
RESP = bytes(250)


def open_db(path):
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE IF NOT EXISTS notes (id INTEGER PRIMARY KEY, actor TEXT NOT NULL, title TEXT NOT NULL, created_at INTEGER NOT NULL)")
    db.execute("CREATE INDEX IF NOT EXISTS notes_actor ON notes (actor, created_at)")
    db.execute("""CREATE TABLE IF NOT EXISTS records (actor TEXT NOT NULL, operation TEXT NOT NULL, key TEXT NOT NULL,
        record_id BLOB NOT NULL, token INTEGER NOT NULL, state INTEGER NOT NULL, fingerprint BLOB NOT NULL,
        version TEXT NOT NULL, lease_until INTEGER, expires_at INTEGER NOT NULL, response BLOB,
        PRIMARY KEY (actor, operation, key))""")
    db.execute("CREATE INDEX IF NOT EXISTS records_expiry ON records (expires_at)")
    return db


def note(db, i):
    db.execute("INSERT INTO notes VALUES (?, 'alice', 'bench note', 1)", (i,))


def claim(db, i):
    db.execute("BEGIN IMMEDIATE")
    db.execute("INSERT INTO records VALUES ('alice', 'create-note', ?, ?, 1, 0, ?, 'v1', 100, 200, NULL) ON CONFLICT DO NOTHING",
               ("k%d" % i, i.to_bytes(16, "big"), FP))
    db.execute("COMMIT")


def complete(db, i):
    db.execute("UPDATE records SET state = 2, response = ?, lease_until = NULL, expires_at = 999 "
               "WHERE actor = 'alice' AND operation = 'create-note' AND key = ? AND record_id = ? AND token = 1 AND state = 0",
               (RESP, "k%d" % i, i.to_bytes(16, "big")))


def base(db, i):
    db.execute("BEGIN IMMEDIATE"); note(db, i); db.execute("COMMIT")


def completed(db, i):
    db.execute("INSERT INTO records VALUES ('alice', 'create-note', ?, ?, 1, 2, ?, 'v1', NULL, 999, ?)",
               ("k%d" % i, i.to_bytes(16, "big"), FP, RESP))


def commit_time_nolookup(db, i):
    db.execute("BEGIN IMMEDIATE"); note(db, i); completed(db, i); db.execute("COMMIT")


def commit_time(db, i):
    # The lookup runs on another connection, whose page cache each commit invalidates.
    READER[0].execute("SELECT state, response FROM records WHERE actor = 'alice' AND operation = 'create-note' AND key = ?",
                      ("k%d" % i,)).fetchall()
    commit_time_nolookup(db, i)


def lease_today(db, i):
    claim(db, i)
    db.execute("BEGIN IMMEDIATE"); note(db, i); db.execute("COMMIT")
    db.execute("BEGIN IMMEDIATE"); complete(db, i); db.execute("COMMIT")


def lease_folded(db, i):
    claim(db, i)
    db.execute("BEGIN IMMEDIATE"); note(db, i); complete(db, i); db.execute("COMMIT")


PATTERNS = [("base", base), ("commit_time_nolookup", commit_time_nolookup), ("commit_time", commit_time),
            ("lease_today", lease_today), ("lease_folded", lease_folded)]
READER = [None]
offset = 0
for r in range(1, ROUNDS + 1):
    rates = {}
    for name, run in PATTERNS:
        db = open_db(os.path.join(DIR, "%s.db" % name))
        READER[0] = sqlite3.connect(os.path.join(DIR, "%s.db" % name), isolation_level=None)
        start = time.perf_counter()
        for i in range(offset, offset + N):
            run(db, i)
        rates[name] = N / (time.perf_counter() - start)
        READER[0].close()
        db.close()
    offset += N
    print(r, " ".join("%s %.0f (%.3f)" % (n, rates[n], rates[n] / rates["base"]) for n, _ in PATTERNS))
