//! The checker against servers built here: a correct one passes every case, each known bug is
//! caught by the case meant for it, and hostile ones end as verdicts, never as crashes.

mod bugs;
mod cli;
mod correct;
mod hostile;
mod server;

use idemkey_check::{CaseId, Report, Verdict};

/// Panics with the table unless each case in `ids` has verdict `expected`.
fn assert_verdicts(report: &Report, ids: &[CaseId], expected: &str) {
    for &id in ids {
        let case = report
            .case(id)
            .unwrap_or_else(|| panic!("{id} did not run"));
        assert_eq!(
            case.verdict.as_str(),
            expected,
            "{id}: {}\n{}",
            case.evidence,
            report.table()
        );
    }
}

/// Panics with the table unless exactly the cases in `failing` failed.
fn assert_failed_exactly(report: &Report, failing: &[CaseId]) {
    let mut expected = failing.to_vec();
    expected.sort();
    let mut failed = report.failed();
    failed.sort();
    assert_eq!(failed, expected, "\n{}", report.table());
}

/// Every case other than `except` passed.
fn assert_others_pass(report: &Report, except: &[CaseId]) {
    let others: Vec<CaseId> = CaseId::ALL
        .into_iter()
        .filter(|id| !except.contains(id))
        .collect();
    assert_verdicts(report, &others, "pass");
    assert!(
        report
            .cases
            .iter()
            .all(|c| !matches!(c.verdict, Verdict::Skipped { .. })),
        "{}",
        report.table()
    );
}
