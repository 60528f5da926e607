//! Each known bug is caught by its case, and only plausibly related cases fail.

use idemkey_check::{CaseId, Checker, Report};

use crate::{
    assert_failed_exactly, assert_others_pass, assert_verdicts,
    server::{Bugs, TestServer},
};

async fn check(bugs: Bugs) -> Report {
    let server = TestServer::start(bugs).await;
    let checker = Checker::new(server.full_config()).expect("valid config");
    checker.run().await.expect("server reachable")
}

fn evidence(report: &Report, id: CaseId) -> &str {
    &report.case(id).expect("case ran").evidence
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_storage_fails_every_retry_case() {
    let report = check(Bugs {
        no_storage: true,
        ..Bugs::default()
    })
    .await;
    let failing = [
        CaseId::Replay,
        CaseId::ReplayFidelity,
        CaseId::JsonEquivalence,
        CaseId::LostResponse,
        CaseId::Mismatch,
        CaseId::ConcurrentBurst,
    ];
    assert_failed_exactly(&report, &failing);
    assert_others_pass(&report, &failing);
    assert!(evidence(&report, CaseId::Mismatch).contains("created another resource"));
    assert!(evidence(&report, CaseId::ConcurrentBurst).contains("16 resources created"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_then_insert_without_a_claim_fails_the_burst() {
    let report = check(Bugs {
        racy_claim: true,
        ..Bugs::default()
    })
    .await;
    assert_verdicts(&report, &[CaseId::ConcurrentBurst], "fail");
    assert!(evidence(&report, CaseId::ConcurrentBurst).contains("resources created"));
    // The lost request and its retry may race as well: the same bug, so either verdict.
    assert_others_pass(&report, &[CaseId::ConcurrentBurst, CaseId::LostResponse]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scope_without_the_actor_fails_cross_actor() {
    let report = check(Bugs {
        ignore_actor: true,
        ..Bugs::default()
    })
    .await;
    assert_failed_exactly(&report, &[CaseId::CrossActor]);
    assert_others_pass(&report, &[CaseId::CrossActor]);
    assert!(
        evidence(&report, CaseId::CrossActor).starts_with("actor 2 received actor 1's response")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_fingerprint_fails_mismatch() {
    let report = check(Bugs {
        no_fingerprint: true,
        ..Bugs::default()
    })
    .await;
    assert_failed_exactly(&report, &[CaseId::Mismatch]);
    assert_others_pass(&report, &[CaseId::Mismatch]);
    assert!(evidence(&report, CaseId::Mismatch).contains("first request's response"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_failures_fail_failure_not_stored() {
    let report = check(Bugs {
        store_failures: true,
        ..Bugs::default()
    })
    .await;
    assert_failed_exactly(&report, &[CaseId::FailureNotStored]);
    assert_others_pass(&report, &[CaseId::FailureNotStored]);
    assert!(evidence(&report, CaseId::FailureNotStored).contains("answered 422"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replayed_failures_are_named_as_such() {
    let report = check(Bugs {
        store_failures: true,
        no_fingerprint: true,
        ..Bugs::default()
    })
    .await;
    assert_failed_exactly(&report, &[CaseId::FailureNotStored, CaseId::Mismatch]);
    let found = evidence(&report, CaseId::FailureNotStored);
    assert!(
        found.starts_with("the rejection was stored and replayed"),
        "{found}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replays_without_headers_fail_fidelity_only() {
    let report = check(Bugs {
        replay_without_headers: true,
        ..Bugs::default()
    })
    .await;
    assert_failed_exactly(&report, &[CaseId::ReplayFidelity]);
    assert_others_pass(&report, &[CaseId::ReplayFidelity]);
    let found = evidence(&report, CaseId::ReplayFidelity);
    assert!(
        found.contains("location") && found.contains("content-type"),
        "{found}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replays_with_another_status_fail_replay_and_fidelity() {
    let report = check(Bugs {
        replay_status_200: true,
        ..Bugs::default()
    })
    .await;
    assert_failed_exactly(&report, &[CaseId::Replay, CaseId::ReplayFidelity]);
    assert_others_pass(&report, &[CaseId::Replay, CaseId::ReplayFidelity]);
    assert!(evidence(&report, CaseId::ReplayFidelity).contains("status 201 then 200"));
}
