//! [`Checker`]: runs the configured cases against the API and builds the [`Report`].

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::{
    CheckConfig, Report, Result,
    cases::{self, Finding},
    context::Ctx,
    report::CaseReport,
};

/// Runs the conformance cases of a [`CheckConfig`] against a live API.
///
/// Every case uses fresh random keys, so checks may run again, or side by side, against the
/// same API.
#[derive(Debug)]
pub struct Checker {
    ctx: Ctx,
    progress: bool,
}

impl Checker {
    /// Validates `config` and prepares the HTTP client; fails on invalid input
    /// (bad JSON bodies, non-`http` URLs, a concurrency below 2).
    pub fn new(config: CheckConfig) -> Result<Self> {
        Ok(Self {
            ctx: Ctx::new(config)?,
            progress: false,
        })
    }

    /// Shows a progress bar on stderr while running (only when stderr is a terminal).
    /// Defaults to off.
    #[must_use]
    pub fn with_progress(mut self, progress: bool) -> Self {
        self.progress = progress;
        self
    }

    /// Runs every configured case in order.
    ///
    /// Fails with [`Error::Connect`](crate::Error::Connect) when the API's host cannot be reached
    /// at all; a case whose requests fail later is reported as failed instead.
    pub async fn run(&self) -> Result<Report> {
        self.ctx.preflight().await?;
        let bar = self.progress_bar();
        let mut cases = Vec::with_capacity(self.ctx.config.cases.len());
        for &id in &self.ctx.config.cases {
            bar.set_message(id.as_str());
            let Finding {
                verdict,
                evidence,
                notes,
            } = cases::run(id, &self.ctx).await;
            let explanation = id.explanation().to_owned();
            cases.push(CaseReport {
                id,
                explanation,
                verdict,
                evidence,
                notes,
            });
            bar.inc(1);
        }
        bar.finish_and_clear();
        Ok(Report::new(self.ctx.config.create_url.as_str(), cases))
    }

    fn progress_bar(&self) -> ProgressBar {
        let target = if self.progress {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let len = self.ctx.config.cases.len() as u64;
        let bar = ProgressBar::with_draw_target(Some(len), target);
        let style = ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        bar
    }
}
