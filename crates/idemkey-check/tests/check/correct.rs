//! A correct server passes; options left out skip exactly their cases.

use idemkey_check::{CaseId, Checker, Verdict};

use crate::{
    assert_others_pass, assert_verdicts,
    server::{Bugs, TestServer},
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_correct_server_passes_every_case() {
    let server = TestServer::start(Bugs::default()).await;
    let report = Checker::new(server.full_config())
        .unwrap()
        .run()
        .await
        .unwrap();
    assert_eq!(report.cases.len(), CaseId::ALL.len());
    assert_others_pass(&report, &[]);
    assert_eq!(report.summary.passed, CaseId::ALL.len());
    let burst = report.case(CaseId::ConcurrentBurst).unwrap();
    assert!(
        burst.evidence.starts_with("16 requests"),
        "{}",
        burst.evidence
    );
    let replay = report.case(CaseId::Replay).unwrap();
    assert!(
        replay.notes[0].contains("marked Idempotent-Replayed: true"),
        "{:?}",
        replay.notes
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_options_their_cases_are_skipped() {
    let server = TestServer::start(Bugs::default()).await;
    let report = Checker::new(server.minimal_config())
        .unwrap()
        .run()
        .await
        .unwrap();
    for id in [CaseId::CrossActor, CaseId::FailureNotStored] {
        let case = report.case(id).unwrap();
        assert!(
            matches!(case.verdict, Verdict::Skipped { .. }),
            "{id}: {:?}",
            case.verdict
        );
    }
    assert!(
        report
            .case(CaseId::LostResponse)
            .unwrap()
            .evidence
            .contains("no --list")
    );
    assert!(report.failed().is_empty(), "{}", report.table());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_without_required_keys_skips_missing_key() {
    let server = TestServer::start(Bugs {
        optional_key: true,
        ..Bugs::default()
    })
    .await;
    let report = Checker::new(server.full_config())
        .unwrap()
        .run()
        .await
        .unwrap();
    let case = report.case(CaseId::MissingKey).unwrap();
    let Verdict::Skipped { reason } = &case.verdict else {
        panic!("{:?}", case.verdict)
    };
    assert!(reason.starts_with("API does not require keys"), "{reason}");
    assert!(report.failed().is_empty(), "{}", report.table());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_409_on_mismatch_is_flagged_not_failed() {
    let server = TestServer::start(Bugs {
        mismatch_409: true,
        ..Bugs::default()
    })
    .await;
    let config = server.full_config().cases([CaseId::Mismatch]);
    let report = Checker::new(config).unwrap().run().await.unwrap();
    assert_verdicts(&report, &[CaseId::Mismatch], "pass");
    let case = report.case(CaseId::Mismatch).unwrap();
    assert!(
        case.notes.iter().any(|n| n.contains("409")),
        "{:?}",
        case.notes
    );
}
