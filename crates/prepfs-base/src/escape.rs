//! The one rule for a name printed: every path, file name, key or other name that comes from
//! the dataset (or any input) goes into a log line, an error message or a command's output
//! through [`escaped`], never as it is. A name may hold any byte but `/` and NUL, so printed raw
//! a newline in it would start a line of its author's choosing in the log (a log file another
//! program reads, such as a cron line in a file behind a planted link), and an escape byte
//! would drive the terminal showing it.
//!
//! Escaped: `\` as `\\`, newline, carriage return and tab as `\n`, `\r`, `\t`, every other
//! control character (C0, DEL, C1) as `\xNN` (C1 as `\u{NN}`), the Unicode line and paragraph
//! separators and the bidirectional overrides (which reorder what a reader sees) as `\u{NNNN}`,
//! and each byte that is not UTF-8 as `\xNN`. Everything else is printed as it is, so a plain
//! name reads the same. Escaping is for printing only: listings through the mount keep the real
//! names, and JSON (`stats.json`, the loader's frames) escapes by its own rules.

use std::ffi::OsStr;
use std::fmt::{self, Write};

/// A name as printed: see the module documentation.
#[derive(Clone, Copy)]
pub struct Escaped<'a>(&'a [u8]);

/// `name` (a path, an `OsStr`, a `str`) as printed: see the module documentation.
pub fn escaped<S: AsRef<OsStr> + ?Sized>(name: &S) -> Escaped<'_> {
    Escaped(name.as_ref().as_encoded_bytes())
}

/// Raw bytes (a tar member's name, an object key) as printed, as [`escaped`].
pub fn escaped_bytes(raw: &[u8]) -> Escaped<'_> {
    Escaped(raw)
}

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for chunk in self.0.utf8_chunks() {
            let valid = chunk.valid();
            // Runs of plain characters are written whole.
            let mut plain = 0;
            for (i, c) in valid.char_indices() {
                let Some(write) = escape_of(c) else { continue };
                f.write_str(&valid[plain..i])?;
                write(f, c)?;
                plain = i + c.len_utf8();
            }
            f.write_str(&valid[plain..])?;
            for b in chunk.invalid() {
                write!(f, "\\x{b:02x}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_char('"')?;
        fmt::Display::fmt(self, f)?;
        f.write_char('"')
    }
}

type Writer = fn(&mut fmt::Formatter<'_>, char) -> fmt::Result;

/// How `c` is written, if it is escaped.
fn escape_of(c: char) -> Option<Writer> {
    match c {
        '\\' => Some(|f, _| f.write_str("\\\\")),
        '\n' => Some(|f, _| f.write_str("\\n")),
        '\r' => Some(|f, _| f.write_str("\\r")),
        '\t' => Some(|f, _| f.write_str("\\t")),
        '\0'..='\x1f' | '\x7f' => Some(|f, c| write!(f, "\\x{:02x}", c as u32)),
        // C1 controls, the line and paragraph separators, the bidirectional embeddings,
        // overrides and isolates.
        '\u{80}'..='\u{9f}' | '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => {
            Some(|f, c| write!(f, "\\u{{{:x}}}", c as u32))
        }
        _ => None,
    }
}

/// The URL as shown in stats, logs and the printed config: a password replaced by `***`.
pub fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{}{user}:***{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;

    #[test]
    fn control_characters_newlines_backslashes_and_stray_bytes_are_escaped_and_the_rest_is_kept() {
        let name = OsStr::from_bytes(b"a\n* * * * * root touch /tmp/pwned\n.jpg");
        assert_eq!(escaped(name).to_string(), "a\\n* * * * * root touch /tmp/pwned\\n.jpg");
        assert_eq!(escaped("tab\there\r").to_string(), "tab\\there\\r");
        assert_eq!(escaped("\x1b[31mred\x07\x7f").to_string(), "\\x1b[31mred\\x07\\x7f");
        assert_eq!(escaped(OsStr::from_bytes(b"caf\xff\xfe.jpg")).to_string(), "caf\\xff\\xfe.jpg");
        assert_eq!(escaped("back\\slash").to_string(), "back\\\\slash");
        assert_eq!(escaped("\u{85}x\u{2028}y\u{202e}gpj.exe").to_string(), "\\u{85}x\\u{2028}y\\u{202e}gpj.exe");
        // A plain name, UTF-8 included, prints as it is.
        for plain in ["/data/train/n01440764/n01440764_10026.JPEG", "café/日本語 file.png", ""] {
            assert_eq!(escaped(plain).to_string(), plain);
        }
        assert_eq!(escaped(Path::new("/a b/c")).to_string(), "/a b/c");
        assert_eq!(format!("{:?}", escaped("x\ny")), "\"x\\ny\"");
    }

    #[test]
    fn nothing_escaped_ever_holds_a_control_character_or_a_line_break() {
        // Every byte value, alone and in the middle of a name, and every char up to U+3000.
        let mut names: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b'a', b, b'z']).collect();
        names.extend((0..0x3000u32).filter_map(char::from_u32).map(|c| format!("<{c}>").into_bytes()));
        for name in names {
            let out = escaped(OsStr::from_bytes(&name)).to_string();
            assert!(!out.chars().any(|c| c.is_control() || matches!(c, '\u{2028}' | '\u{2029}')), "{name:?} -> {out:?}");
        }
    }

    #[test]
    fn distinct_names_print_distinctly() {
        // The backslash is escaped too, so a name holding the text `\n` is not a newline's.
        let names: [&[u8]; 5] = [b"a\nb", b"a\\nb", b"a\\\nb", b"a\xffb", b"a\\xffb"];
        let printed: std::collections::HashSet<String> = names.iter().map(|n| escaped(OsStr::from_bytes(n)).to_string()).collect();
        assert_eq!(printed.len(), names.len(), "{printed:?}");
    }
}
