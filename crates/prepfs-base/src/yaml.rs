//! How a refused YAML file is reported, for the mount config (`config`) and the planner's
//! parameter file (`planner`): serde_norway's own errors with their line, and the line of a key
//! whose value parsed but was refused.

use std::fmt;

/// serde_norway's message, with ` (line L)` added where the message does not already say where
/// (its messages mostly carry "at line L column C"); unknown keys then read well.
pub fn describe_error(e: &serde_norway::Error) -> String {
    let text = e.to_string();
    match e.location() {
        Some(loc) if !text.contains("line") => format!("{text} (line {})", loc.line()),
        _ => text,
    }
}

/// The 1-based line on which `key:` first appears, for messages about values that parsed but
/// were refused: at the start of a line (after indentation, a list's `- ` or a flow map's `{`),
/// or after a space inside a flow map (`cache: { memory: 2GiB, split: 20-30-50 }`). Spaces may
/// stand before the colon. Comments are not looked at.
pub(crate) fn line_of_key(text: &str, key: &str) -> Option<usize> {
    let names_key = |s: &str| s.strip_prefix(key).is_some_and(|rest| rest.trim_start().starts_with(':'));
    text.lines()
        .position(|line| {
            let line = if line.trim_start().starts_with('#') { "" } else { line };
            let line = line.find(" #").map_or(line, |i| &line[..i]);
            let start = line.trim_start().trim_start_matches("- ").trim_start_matches('{').trim_start();
            names_key(start) || line.match_indices(' ').any(|(i, _)| names_key(&line[i + 1..]))
        })
        .map(|i| i + 1)
}

/// The line a key sits on, where known; displays as ` (line N)` or nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Line(pub Option<usize>);

impl Line {
    /// The line of `key` in `text` (see [`line_of_key`]).
    pub fn of(text: &str, key: &str) -> Line {
        Line(line_of_key(text, key))
    }
}

impl fmt::Display for Line {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(line) => write!(f, " (line {line})"),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_found_in_block_and_flow_maps_but_not_in_comments() {
        let text = "# split: in a comment\nseed: 1\ncache: { memory: 2GiB, split: 20-30-50 }\n  - resize: 256\nm : 3 # n_total: here\n";
        assert_eq!(line_of_key(text, "seed"), Some(2));
        assert_eq!(line_of_key(text, "split"), Some(3));
        assert_eq!(line_of_key(text, "memory"), Some(3));
        assert_eq!(line_of_key(text, "resize"), Some(4));
        assert_eq!(line_of_key(text, "m"), Some(5));
        assert_eq!(line_of_key(text, "n_total"), None);
        assert_eq!(line_of_key(text, "size"), None);
        assert_eq!(Line::of(text, "seed").to_string(), " (line 2)");
        assert_eq!(Line::of(text, "absent").to_string(), "");
    }
}
