//! The fault workload's figures in docs/guarantees.md are those of a committed record.
//!
//! `tests/faults.rs` writes the record of a run (`SQLOCK_FAULT_RECORD=docs/soak/...`):
//! its table and the facts of the run and its machine. Every table of the page that
//! follows a link to such a record must be the record's table, line for line, and the
//! text between the link and the table must state the record's `SQLOCK_FAULT_SECS`.
//! No server needed.

use std::path::Path;

/// The lines of the first table (lines starting with `|`) of `text`, and where in
/// `text` the table ends.
fn first_table(text: &str) -> Option<(Vec<&str>, usize)> {
    let mut lines = Vec::new();
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        let end = at + line.len();
        if line.starts_with('|') {
            lines.push(line.trim_end());
        } else if !lines.is_empty() {
            return Some((lines, at));
        }
        at = end;
    }
    (!lines.is_empty()).then_some((lines, at))
}

/// The `SQLOCK_FAULT_SECS=N` a text states first.
fn fault_secs(text: &str) -> Option<&str> {
    let start = text.find("SQLOCK_FAULT_SECS=")? + "SQLOCK_FAULT_SECS=".len();
    let digits = text[start..]
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len() - start);
    Some(&text[start..start + digits])
}

#[test]
fn the_published_fault_figures_are_those_of_committed_records() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let page = std::fs::read_to_string(root.join("docs/guarantees.md")).unwrap();
    let soak = page
        .find("### The soak run")
        .expect("docs/guarantees.md has a soak section");
    let mut checked = Vec::new();
    let mut rest = 0;
    while let Some(found) = page[rest..].find("](soak/") {
        let link = rest + found + "](".len();
        let end = link + page[link..].find(')').expect("a closed link");
        let file = &page[link..end];
        let record = std::fs::read_to_string(root.join("docs").join(file))
            .unwrap_or_else(|e| panic!("docs/guarantees.md links {file}, which is missing: {e}"));
        let (want, _) = first_table(&record).unwrap_or_else(|| panic!("{file} has no table"));
        let (shown, table_end) = first_table(&page[end..])
            .unwrap_or_else(|| panic!("no table follows the link to {file}"));
        assert_eq!(
            shown, want,
            "the table after the link to {file} is not the record's"
        );
        let secs = fault_secs(&record)
            .unwrap_or_else(|| panic!("{file} does not say its SQLOCK_FAULT_SECS"));
        let between = &page[end..end + page[end..].find("\n|").unwrap_or(0)];
        assert_eq!(
            fault_secs(between),
            Some(secs),
            "the text between the link to {file} and its table must state \
             `SQLOCK_FAULT_SECS={secs}`"
        );
        checked.push((link, file.to_owned()));
        rest = end + table_end;
    }
    assert!(
        checked.iter().any(|(at, _)| *at > soak),
        "the soak section links no record: {checked:?}"
    );
}
