//! Every problem the `idemkey` binary can answer has a section of idemkey's problem page
//! (`docs/problems.md`, rendered as `idemkey::problems` on docs.rs), where its default `type`
//! leads: the layer's kinds, the proxy's own and the notes service's own.
//!
//! The page's test in the `idemkey` package checks that each section's heading,
//! ``### `slug` ``, is anchored at the slug itself; this one that each slug has that heading.

use idemkey_core::problem::PROBLEM_BASE;
use idemkey_core::{Problem, ProblemKind};

// A link to the repository's page, so that the packaged crate carries it.
const PAGE: &str = include_str!("problems.md");

fn every_slug() -> Vec<&'static str> {
    let kinds = ProblemKind::ALL.map(ProblemKind::slug);
    let applications = idemkey_proxy::PROBLEM_SLUGS
        .into_iter()
        .chain(idemkey_notes::PROBLEM_SLUGS);
    kinds.into_iter().chain(applications).collect()
}

#[test]
fn every_problem_has_a_section_its_default_type_leads_to() {
    let headings: Vec<&str> = PAGE.lines().map(str::trim_end).collect();
    for slug in every_slug() {
        let type_uri = Problem::custom(slug, "", 500).type_uri;
        assert_eq!(type_uri, format!("{PROBLEM_BASE}{slug}"));
        let heading = format!("### `{slug}`");
        assert!(
            headings.contains(&heading.as_str()),
            "{type_uri} leads nowhere: docs/problems.md needs a section {heading}"
        );
    }
}

#[test]
fn every_section_is_a_problem_idemkey_answers() {
    let slugs = every_slug();
    let sections = PAGE
        .lines()
        .filter_map(|line| line.strip_prefix("### `")?.strip_suffix('`'));
    for section in sections {
        assert!(
            slugs.contains(&section),
            "docs/problems.md documents {section}, which nothing answers"
        );
    }
}
