//! The photographs a cost example runs on: every .jpg, .jpeg and .png under a directory.

use std::path::{Path, PathBuf};

/// Appends the photographs under `dir` (recursively, sorted) to `out`.
pub fn photos(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            photos(&p, out);
        } else if p.extension().and_then(|e| e.to_str()).is_some_and(|e| ["jpg", "jpeg", "png"].contains(&e.to_lowercase().as_str())) {
            out.push(p);
        }
    }
}
