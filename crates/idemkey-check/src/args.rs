//! The `idemkey check` command line: [`CheckArgs`] and [`run`].

use std::{path::PathBuf, time::Duration};

use crate::{CaseId, CheckConfig, CheckStatus, Checker, Result, printable::printable};

/// Arguments of `idemkey check`: a black-box conformance check of any API's idempotency keys.
#[derive(Debug, Clone, clap::Args)]
pub struct CheckArgs {
    /// URL of the create endpoint, called with POST (http:// only).
    #[arg(value_name = "CREATE_URL")]
    pub create_url: String,
    /// A valid create request body (JSON).
    #[arg(long, value_name = "JSON")]
    pub body: String,
    /// A different valid body, for the mismatch case (JSON).
    #[arg(long, value_name = "JSON")]
    pub alt_body: String,
    /// A header sent on every request as the first actor, "Name: value" (repeatable).
    #[arg(short = 'H', long = "header", value_name = "H")]
    pub headers: Vec<String>,
    /// A header of a second actor, "Name: value" (repeatable); enables the cross-actor case.
    #[arg(long = "actor2-header", value_name = "H")]
    pub actor2_headers: Vec<String>,
    /// GET endpoint listing the first actor's resources, to count them (absolute, or relative
    /// to CREATE_URL).
    #[arg(long, value_name = "URL")]
    pub list: Option<String>,
    /// A body the API rejects, for the "failures are not stored" case (JSON).
    #[arg(long, value_name = "JSON")]
    pub invalid_body: Option<String>,
    /// Size of the concurrent burst.
    #[arg(long, value_name = "N", default_value_t = 32)]
    pub concurrency: usize,
    /// Bound on every request, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    pub timeout: u64,
    /// Run only this case (repeatable); default: all.
    #[arg(long = "case", value_name = "ID")]
    pub cases: Vec<CaseId>,
    /// Also write a machine-readable report to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

impl CheckArgs {
    /// The [`CheckConfig`] these arguments describe (headers, URLs and numbers checked).
    pub fn to_config(&self) -> Result<CheckConfig> {
        let mut config = CheckConfig::new(&self.create_url, &self.body, &self.alt_body)?
            .concurrency(self.concurrency)
            .timeout(Duration::from_secs(self.timeout));
        for line in &self.headers {
            config = config.header(line)?;
        }
        for line in &self.actor2_headers {
            config = config.actor2_header(line)?;
        }
        if let Some(list) = &self.list {
            config = config.list_url(list)?;
        }
        if let Some(invalid) = &self.invalid_body {
            config = config.invalid_body(invalid);
        }
        if !self.cases.is_empty() {
            config = config.cases(self.cases.iter().copied());
        }
        Ok(config)
    }
}

/// Runs `idemkey check`: prints the table on stdout (a progress bar on stderr while running,
/// when it is a terminal), writes `--json`, and returns the exit status. A usage or connection
/// error, or a report that cannot be written, is printed as one line on stderr and gives
/// [`CheckStatus::Error`].
pub async fn run(args: CheckArgs) -> CheckStatus {
    match check(&args).await {
        Ok(status) => status,
        Err(error) => {
            // Error texts may quote input or OS messages: print them escaped like the table.
            eprintln!("idemkey check: {}", printable(&error.to_string()));
            CheckStatus::Error
        }
    }
}

async fn check(args: &CheckArgs) -> Result<CheckStatus> {
    let checker = Checker::new(args.to_config()?)?.with_progress(true);
    let report = checker.run().await?;
    println!("{}", report.table());
    if let Some(path) = &args.json {
        report.write_json(path)?;
    }
    Ok(report.status())
}
