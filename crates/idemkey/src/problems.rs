//! Every problem idemkey answers, what it means and what to do: the repository's
//! `docs/problems.md`.
//!
// Rendered here so that each problem type is a heading whose anchor is its slug: a default
// `type` (`PROBLEM_BASE` followed by the slug) is this page's address on docs.rs with that
// anchor. `problems.md` in the crate directory is a link to the document so that packaging
// the crate carries it. The module holds no items.
#![doc = include_str!("../problems.md")]

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use crate::problem::PROBLEM_BASE;
    use crate::{Problem, ProblemKind};

    const PAGE: &str = include_str!("../problems.md");

    /// A markdown page's headings, in order, each with the id rustdoc gives it: the text
    /// lower-cased, white space made `-`, punctuation other than `-` and `_` dropped, and `-1`,
    /// `-2`... added to a repeated one. Lines in fenced code are not headings. The page's
    /// headings hold plain text and code spans only: a link's address would count here and not
    /// in rustdoc.
    fn headings(markdown: &str) -> Vec<(&str, String)> {
        let mut seen = HashMap::<String, usize>::new();
        let mut fenced = false;
        let mut headings = Vec::new();
        for line in markdown.lines().map(str::trim_start) {
            if line.starts_with("```") || line.starts_with("~~~") {
                fenced = !fenced;
            }
            let Some(text) = heading(line).filter(|_| !fenced) else {
                continue;
            };
            let id: String = text.chars().filter_map(slugify).collect();
            let repeats = seen.entry(id.clone()).or_default();
            let id = match *repeats {
                0 => id,
                n => format!("{id}-{n}"),
            };
            *repeats += 1;
            headings.push((text, id));
        }
        headings
    }

    /// The text of an ATX heading line (`## Text`), without its marks.
    fn heading(line: &str) -> Option<&str> {
        let text = line.trim_start_matches('#');
        let level = line.len() - text.len();
        let spaced = text.is_empty() || text.starts_with([' ', '\t']);
        ((1..=6).contains(&level) && spaced).then(|| text.trim().trim_end_matches('#').trim_end())
    }

    /// What rustdoc keeps of a heading's character in its id.
    fn slugify(c: char) -> Option<char> {
        if c.is_alphanumeric() || c == '-' || c == '_' {
            Some(c.to_ascii_lowercase())
        } else if c.is_ascii_whitespace() {
            Some('-')
        } else {
            None
        }
    }

    #[test]
    fn every_kind_s_default_type_is_a_heading_of_this_page() {
        let headings = headings(PAGE);
        for kind in ProblemKind::ALL {
            let slug = kind.slug();
            let type_uri = Problem::new(kind).type_uri;
            assert_eq!(type_uri, format!("{PROBLEM_BASE}{slug}"));
            assert!(
                headings.iter().any(|(_, id)| id == slug),
                "{type_uri} names no heading of docs/problems.md: give {slug} a section"
            );
        }
    }

    #[test]
    fn the_base_is_this_page_on_docs_rs_for_every_release() {
        assert_eq!(
            PROBLEM_BASE,
            "https://docs.rs/idemkey/latest/idemkey/problems/index.html#"
        );
    }

    /// Each problem's section is ``### `slug` ``: its anchor is the slug itself, never one
    /// rustdoc had to make unique, so a heading line names a `type` (applications' tests
    /// check their slugs by that line).
    #[test]
    fn each_problem_section_is_anchored_at_its_slug() {
        let headings = headings(PAGE);
        let sections: Vec<_> = headings
            .iter()
            .filter(|(text, _)| text.starts_with('`'))
            .collect();
        assert!(sections.len() >= ProblemKind::ALL.len());
        for (text, id) in sections {
            assert_eq!(
                *text,
                format!("`{id}`"),
                "a section of another form, or repeated"
            );
        }
    }

    #[test]
    fn anchors_are_made_as_rustdoc_makes_them() {
        let page = "# Problem types\n## 10. Errors\n### `key-reused`\n```sh\n# a comment\n```\n\
                    ### `key-reused`\nnot # a heading\n#nospace\n";
        let ids: Vec<_> = headings(page).into_iter().map(|(_, id)| id).collect();
        assert_eq!(
            ids,
            ["problem-types", "10-errors", "key-reused", "key-reused-1"]
        );
    }
}
