//! How idemkey behaves, section by section: the repository's `docs/behaviour.md`.
//!
// Rendered here so that each section is a heading with an anchor a reader can follow from a
// "behaviour §N" citation; `behaviour.md` in the crate directory is a link to the document so
// that packaging the crate carries it. The module holds no items.
#![doc = include_str!("../behaviour.md")]
