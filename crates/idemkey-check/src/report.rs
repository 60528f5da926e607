//! The outcome of a check: [`Report`], per-case [`CaseReport`]s, the table and the JSON.

use std::{fs, path::Path, process::ExitCode};

use comfy_table::{ContentArrangement, Table, presets::UTF8_FULL_CONDENSED};
use serde::{Deserialize, Serialize};

use crate::{
    CaseId, Error, Result,
    printable::{json_printable, printable},
};

/// The verdict of one case.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "lowercase")]
pub enum Verdict {
    /// The API behaved as the case requires.
    Pass,
    /// The API did not; the evidence says how.
    Fail,
    /// The case could not run with this configuration or API.
    Skipped {
        /// Why.
        reason: String,
    },
}

impl Verdict {
    /// `pass`, `fail` or `skipped`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "fail",
            Verdict::Skipped { .. } => "skipped",
        }
    }
}

/// One case's result.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CaseReport {
    /// The case's stable id.
    pub id: CaseId,
    /// What the case checks.
    pub explanation: String,
    /// Pass, fail or skipped (serialized as `"verdict"`, plus `"reason"` when skipped).
    #[serde(flatten)]
    pub verdict: Verdict,
    /// One line of evidence: what was sent and seen.
    pub evidence: String,
    /// Informational remarks that do not change the verdict.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// How many cases passed, failed and were skipped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// Cases that passed.
    pub passed: usize,
    /// Cases that failed.
    pub failed: usize,
    /// Cases that were skipped.
    pub skipped: usize,
}

/// The result of a whole check run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    /// The create endpoint that was checked.
    pub target: String,
    /// Counts by verdict.
    pub summary: Summary,
    /// One entry per case, in the order they ran.
    pub cases: Vec<CaseReport>,
}

impl Report {
    /// A report on `target` with `cases`; the summary is computed.
    pub fn new(target: impl Into<String>, cases: Vec<CaseReport>) -> Self {
        let mut summary = Summary::default();
        for case in &cases {
            match case.verdict {
                Verdict::Pass => summary.passed += 1,
                Verdict::Fail => summary.failed += 1,
                Verdict::Skipped { .. } => summary.skipped += 1,
            }
        }
        Self {
            target: target.into(),
            summary,
            cases,
        }
    }

    /// The result of case `id`, if it ran.
    pub fn case(&self, id: CaseId) -> Option<&CaseReport> {
        self.cases.iter().find(|case| case.id == id)
    }

    /// The ids of the cases that failed.
    pub fn failed(&self) -> Vec<CaseId> {
        self.cases
            .iter()
            .filter(|c| c.verdict == Verdict::Fail)
            .map(|c| c.id)
            .collect()
    }

    /// [`CheckStatus::Passed`] when no case failed, else [`CheckStatus::Failed`].
    pub fn status(&self) -> CheckStatus {
        if self.summary.failed == 0 {
            CheckStatus::Passed
        } else {
            CheckStatus::Failed
        }
    }

    /// The readable table: case, verdict, evidence (notes appended), then a summary line.
    ///
    /// Evidence quotes the server, so control characters, escape sequences and bidirectional
    /// overrides in it are shown as escapes (`\u{1b}`): the table is safe to print on a terminal.
    pub fn table(&self) -> String {
        let mut table = Table::new();
        table.load_style(UTF8_FULL_CONDENSED);
        table.set_content_arrangement(ContentArrangement::Dynamic);
        table.set_header(["case", "verdict", "evidence"]);
        for case in &self.cases {
            let mut evidence = case.evidence.clone();
            for note in &case.notes {
                evidence.push_str(&format!("; note: {note}"));
            }
            table.add_row([
                case.id.as_str().to_owned(),
                case.verdict.as_str().to_owned(),
                printable(&evidence).into_owned(),
            ]);
        }
        let Summary {
            passed,
            failed,
            skipped,
        } = self.summary;
        format!("{table}\n{passed} passed, {failed} failed, {skipped} skipped")
    }

    /// The report as pretty-printed JSON.
    ///
    /// Like any JSON it escapes control characters below U+0020 (ESC is `\u001b`); DEL, C1
    /// controls and bidirectional overrides, which JSON allows raw, are escaped as well, so the
    /// file is safe to print on a terminal and parses to the same report.
    pub fn to_json(&self) -> String {
        // A report holds only strings, numbers and enums: serializing it cannot fail.
        json_printable(serde_json::to_string_pretty(self).unwrap_or_default())
    }

    /// Writes [`to_json`](Self::to_json) to `path`.
    pub fn write_json(&self, path: &Path) -> Result<()> {
        fs::write(path, self.to_json() + "\n").map_err(|source| Error::WriteReport {
            path: path.to_owned(),
            source,
        })
    }
}

/// The overall result of `idemkey check`, and its exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckStatus {
    /// No case failed: exit status 0.
    Passed,
    /// At least one case failed: exit status 1.
    Failed,
    /// A usage or connection error stopped the check: exit status 2.
    Error,
}

impl CheckStatus {
    /// The exit status: 0, 1 or 2.
    pub fn code(self) -> u8 {
        match self {
            CheckStatus::Passed => 0,
            CheckStatus::Failed => 1,
            CheckStatus::Error => 2,
        }
    }
}

impl From<CheckStatus> for ExitCode {
    fn from(status: CheckStatus) -> Self {
        ExitCode::from(status.code())
    }
}

impl std::process::Termination for CheckStatus {
    fn report(self) -> ExitCode {
        self.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(id: CaseId, verdict: Verdict) -> CaseReport {
        CaseReport {
            id,
            explanation: id.explanation().into(),
            verdict,
            evidence: "seen".into(),
            notes: vec![],
        }
    }

    fn report() -> Report {
        let skipped = Verdict::Skipped {
            reason: "no --list".into(),
        };
        let cases = vec![
            case(CaseId::Replay, Verdict::Pass),
            case(CaseId::Mismatch, Verdict::Fail),
            case(CaseId::CrossActor, skipped),
        ];
        Report::new("http://h/v1/notes", cases)
    }

    #[test]
    fn summary_status_and_table() {
        let report = report();
        assert_eq!(
            report.summary,
            Summary {
                passed: 1,
                failed: 1,
                skipped: 1
            }
        );
        assert_eq!(report.status(), CheckStatus::Failed);
        assert_eq!(report.failed(), [CaseId::Mismatch]);
        let table = report.table();
        assert!(table.contains("mismatch") && table.contains("fail"));
        assert!(table.ends_with("1 passed, 1 failed, 1 skipped"));
    }

    #[test]
    fn json_round_trips_with_flat_verdicts() {
        let json = report().to_json();
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(value["cases"][2]["verdict"], "skipped");
        assert_eq!(value["cases"][2]["reason"], "no --list");
        assert_eq!(value["cases"][0]["id"], "replay");
        let back: Report = serde_json::from_str(&json).unwrap();
        assert_eq!(
            back.cases[2].verdict,
            Verdict::Skipped {
                reason: "no --list".into()
            }
        );
    }

    #[test]
    fn server_text_is_escaped_in_the_table_and_the_json() {
        let mut hostile = case(CaseId::Replay, Verdict::Fail);
        hostile.evidence = "500 \u{1b}[2J\u{1b}[H\u{9b}32mPASS\u{7}".into();
        hostile.notes = vec!["line\nbreak".into()];
        let report = Report::new("http://h/v1/notes", vec![hostile.clone()]);
        let table = report.table();
        assert!(!table.contains(['\u{1b}', '\u{9b}', '\u{7}']), "{table:?}");
        // Without the borders and spacing, which depend on the terminal's width.
        let flat: String = table
            .chars()
            .filter(|c| !c.is_whitespace() && !matches!(c, '\u{2500}'..='\u{257f}'))
            .collect();
        for escaped in [r"\u{1b}[2J", r"\u{9b}32m", r"\u{7}", r"line\u{a}break"] {
            assert!(flat.contains(escaped), "{escaped} not in {table:?}");
        }
        let json = report.to_json();
        assert!(!json.contains(['\u{1b}', '\u{9b}', '\u{7}']), "{json:?}");
        let back: Report = serde_json::from_str(&json).unwrap();
        assert_eq!(back.cases[0].evidence, hostile.evidence);
    }

    #[test]
    fn exit_codes() {
        assert_eq!(
            [CheckStatus::Passed, CheckStatus::Failed, CheckStatus::Error].map(CheckStatus::code),
            [0, 1, 2]
        );
    }
}
