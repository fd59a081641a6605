//! A shard pattern as WebDataset users write it, expanded to the shard files it names:
//! brace lists and ranges (`train-{000000..000099}.tar`, `{train,val}-0.tar`, nested), then
//! globs (`*`, `?`, `[a-z]`), in the file name only. Every shard lies in one directory, which
//! becomes the root of the served tree.

use std::io;
use std::path::{Path, PathBuf};

/// The most names a pattern's braces may expand to (a typo such as `{0..99999999}` is refused,
/// not allocated).
const MAX_EXPANDED: usize = 1_000_000;

/// Whether `text` names shards rather than a directory: it has a glob or a brace, or names a
/// `.tar` file (or a compressed one, `.tar.gz`, `.tgz`, ...: named as shards, so that the index
/// says compressed shards are not supported, rather than the mount calling it no directory).
pub fn is_shard_pattern(text: &str) -> bool {
    let path = Path::new(text);
    if path.is_dir() {
        return false;
    }
    const TARS: &[&str] = &[".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".tar.zst", ".tar.lz4"];
    text.contains(['*', '?', '[', '{']) || TARS.iter().any(|t| text.ends_with(t))
}

/// The shards `pattern` names: their directory and their file names, in the order the pattern
/// gives them (each brace alternative in turn, each glob's matches sorted), each once.
pub fn expand(pattern: &str) -> io::Result<(PathBuf, Vec<String>)> {
    let (dir, name) = split_pattern(pattern).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let listing = || -> io::Result<Vec<String>> {
        let mut all = Vec::new();
        for entry in std::fs::read_dir(&dir)? {
            if let Some(n) = entry?.file_name().to_str() {
                all.push(n.to_string());
            }
        }
        Ok(all)
    };
    let names = expand_in(pattern, name, listing, |n| dir.join(n).exists())?;
    Ok((dir, names))
}

/// The names the file-name part `name` of `pattern` gives in a directory whose names `listing`
/// gives (asked once, and only for a glob) and where `exists` says a name is (a name the braces
/// make must be there, as WebDataset fails on a missing shard too): see [`expand`].
pub(crate) fn expand_in(pattern: &str, name: &str, listing: impl FnOnce() -> io::Result<Vec<String>>, exists: impl Fn(&str) -> bool) -> io::Result<Vec<String>> {
    let invalid = |why: String| io::Error::new(io::ErrorKind::InvalidInput, format!("shard pattern {pattern:?}: {why}"));
    let names = braces(name).map_err(invalid)?;
    let mut listing = Some(listing);
    let mut listed: Vec<String> = Vec::new();
    let mut found = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for name in names {
        if name.contains('/') {
            return Err(invalid("a brace may not add a directory".into()));
        }
        if name.contains(['*', '?', '[']) {
            let glob = glob::Pattern::new(&name).map_err(|e| invalid(e.to_string()))?;
            if let Some(list) = listing.take() {
                listed = list()?;
                listed.sort();
            }
            let options = glob::MatchOptions { require_literal_leading_dot: true, ..Default::default() };
            for n in listed.iter().filter(|n| glob.matches_with(n, options)) {
                if seen.insert(n.clone()) {
                    found.push(n.clone());
                }
            }
        } else if seen.insert(name.clone()) {
            if !exists(&name) {
                return Err(io::Error::new(io::ErrorKind::NotFound, format!("shard pattern {pattern:?}: no shard {name}")));
            }
            found.push(name);
        }
    }
    if found.is_empty() {
        return Err(io::Error::new(io::ErrorKind::NotFound, format!("shard pattern {pattern:?} matches no file")));
    }
    Ok(found)
}

/// A pattern's directory and its file-name part; refused (in words) where the directory has a
/// glob or brace, or no file name is given.
pub fn split_pattern(pattern: &str) -> Result<(PathBuf, &str), String> {
    let (dir, name) = match pattern.rfind('/') {
        Some(i) => (&pattern[..i.max(1)], &pattern[i + 1..]),
        None => (".", pattern),
    };
    if dir.contains(['*', '?', '[', '{']) {
        return Err(format!("shard pattern {pattern:?}: globs and braces are taken in the file name only; the shards must lie in one directory"));
    }
    if name.is_empty() {
        return Err(format!("shard pattern {pattern:?} names no file"));
    }
    Ok((PathBuf::from(dir), name))
}

/// Brace expansion: every `{a,b}` list and `{M..N}` range (zero-padded to the width of `M`
/// when it has a leading zero, descending when `M > N`), the first brace first.
pub fn braces(text: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    expand_into(text, &mut out)?;
    Ok(out)
}

fn expand_into(text: &str, out: &mut Vec<String>) -> Result<(), String> {
    let Some(open) = text.find('{') else {
        if text.contains('}') {
            return Err("a `}` without its `{`".into());
        }
        if out.len() >= MAX_EXPANDED {
            return Err(format!("expands to more than {MAX_EXPANDED} names"));
        }
        out.push(text.to_string());
        return Ok(());
    };
    // The matching close, and the top-level commas between.
    let (mut depth, mut close, mut commas) = (0usize, None, Vec::new());
    for (i, c) in text[open..].char_indices().map(|(i, c)| (i + open, c)) {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    close = Some(i);
                    break;
                }
            }
            ',' if depth == 1 => commas.push(i),
            _ => {}
        }
    }
    let close = close.ok_or("a `{` without its `}`")?;
    let (head, inner, tail) = (&text[..open], &text[open + 1..close], &text[close + 1..]);
    let alternatives: Vec<String> = if commas.is_empty() {
        range(inner).ok_or_else(|| format!("`{{{inner}}}` is neither a list (a,b) nor a range (M..N)"))?
    } else {
        let mut parts = Vec::new();
        let mut from = open + 1;
        for &c in commas.iter().chain(std::iter::once(&close)) {
            parts.push(text[from..c].to_string());
            from = c + 1;
        }
        parts
    };
    for alt in alternatives {
        expand_into(&format!("{head}{alt}{tail}"), out)?;
    }
    Ok(())
}

/// `M..N` as its numbers, zero-padded to the width of `M` when `M` starts with a zero.
fn range(inner: &str) -> Option<Vec<String>> {
    let (from, to) = inner.split_once("..")?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(from) || !digits(to) {
        return None;
    }
    let (a, b): (u64, u64) = (from.parse().ok()?, to.parse().ok()?);
    if a.abs_diff(b) >= MAX_EXPANDED as u64 {
        return None;
    }
    let width = if from.len() > 1 && from.starts_with('0') { from.len() } else { 0 };
    let numbers: Vec<u64> = if a <= b { (a..=b).collect() } else { (b..=a).rev().collect() };
    Some(numbers.into_iter().map(|n| format!("{n:0width$}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn brace_ranges_keep_their_zero_padding_and_lists_expand_in_order() {
        assert_eq!(braces("train-{000..003}.tar").expect("range"), ["train-000.tar", "train-001.tar", "train-002.tar", "train-003.tar"]);
        assert_eq!(braces("{a,b}-{1..2}.tar").expect("both"), ["a-1.tar", "a-2.tar", "b-1.tar", "b-2.tar"]);
        assert_eq!(braces("x{3..1}").expect("down"), ["x3", "x2", "x1"]);
        assert_eq!(braces("{a,{b,c}}").expect("nested"), ["a", "b", "c"]);
        assert_eq!(braces("plain.tar").expect("none"), ["plain.tar"]);
        assert!(braces("x{1..").is_err());
        assert!(braces("x}").is_err());
        assert!(braces("{abc}").is_err(), "neither a list nor a range");
        assert!(braces("{0..99999999}").is_err(), "too many names");
    }

    #[test]
    fn a_pattern_names_the_files_its_braces_and_globs_match_in_one_directory() {
        let dir = tempfile::tempdir().expect("tempdir");
        for n in ["train-000.tar", "train-001.tar", "train-002.tar", "val-000.tar", ".hidden.tar", "notes.txt"] {
            std::fs::write(dir.path().join(n), b"").expect("write");
        }
        let root = dir.path().display().to_string();
        let (d, names) = expand(&format!("{root}/train-*.tar")).expect("glob");
        assert_eq!((d.as_path(), names.as_slice()), (dir.path(), &["train-000.tar".to_string(), "train-001.tar".into(), "train-002.tar".into()][..]));
        let (_, names) = expand(&format!("{root}/train-{{000..001}}.tar")).expect("range");
        assert_eq!(names, ["train-000.tar", "train-001.tar"]);
        let (_, names) = expand(&format!("{root}/{{val,train}}-00[0-1].tar")).expect("both");
        assert_eq!(names, ["val-000.tar", "train-000.tar", "train-001.tar"]);
        let (_, names) = expand(&format!("{root}/*.tar")).expect("no hidden files");
        assert!(!names.iter().any(|n| n.starts_with('.')), "{names:?}");
        assert_eq!(expand(&format!("{root}/test-*.tar")).expect_err("none").kind(), io::ErrorKind::NotFound);
        let missing = expand(&format!("{root}/train-{{001..003}}.tar")).expect_err("train-003 missing");
        assert!(missing.kind() == io::ErrorKind::NotFound && missing.to_string().contains("train-003.tar"), "{missing}");
        assert_eq!(expand(&format!("{root}/*/x.tar")).expect_err("dir glob").kind(), io::ErrorKind::InvalidInput);
        assert!(is_shard_pattern(&format!("{root}/train-*.tar")));
        assert!(is_shard_pattern("/data/one.tar"));
        assert!(is_shard_pattern("/data/one.tar.gz") && is_shard_pattern("/data/one.tgz") && is_shard_pattern("s3://b/p/x.tar.zst"), "compressed: named as shards, said by the index");
        assert!(!is_shard_pattern(&root), "a directory is a directory");
    }
}
