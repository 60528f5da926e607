//! Three actix service processes on one PostgreSQL database: 64 creates with one key,
//! released together across them, create one note, in both modes.

use std::net::SocketAddr;

use idemkey_test_support::db::{Backend, Db};
use idemkey_test_support::net::storm::{raw_create, storm};
use idemkey_test_support::process::notes::{ALICE, one_note_answers};
use idemkey_test_support::process::serve::Serve;

use crate::ACTIX_NOTES;

#[idemkey_test_support::test(needs = [postgres])]
async fn a_storm_of_64_across_three_instances_creates_one_note_atomic() {
    storm_of_64(&["--mode", "atomic"]).await;
}

#[idemkey_test_support::test(needs = [postgres])]
async fn a_storm_of_64_across_three_instances_creates_one_note_lease() {
    storm_of_64(&["--mode", "lease"]).await;
}

async fn storm_of_64(args: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::create(Backend::Postgres, dir.path()).await;
    let servers: Vec<Serve> = (0..3)
        .map(|_| Serve::start(ACTIX_NOTES, &db.url(), args))
        .collect();
    let targets: Vec<SocketAddr> = (0..64).map(|i| servers[i % 3].addr).collect();
    let answers = storm(&targets, |addr| {
        raw_create(addr, ALICE, "storm-64", r#"{"title": "hello"}"#)
    })
    .await;
    let notes = db.notes().await;
    assert_eq!(notes.len(), 1, "{args:?}: one note: {notes:?}");
    let label = format!("{args:?}");
    let created = one_note_answers(&label, &answers, &notes[0].0);
    println!("storm {args:?}: 201 x {created}, 409 x {}", 64 - created);
}
