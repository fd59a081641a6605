//! Names of a shard's members: a member name split as WebDataset splits it (the key up to the
//! first dot of its last component, the extension after), and keys and class labels made safe
//! single file names for the served tree.

/// The longest name served (a pixel view adds its own extension to a sample's name).
const MAX_NAME: usize = 240;

/// A member name as WebDataset groups it: `("dir/000001", "jpg")` of `dir/000001.jpg`
/// (`./` prefixes dropped). `None` for a name with no extension.
pub(crate) fn split_member(name: &[u8]) -> Option<(&[u8], &[u8])> {
    let mut name = name;
    while let Some(rest) = name.strip_prefix(b"./") {
        name = rest;
    }
    let last = name.iter().rposition(|&b| b == b'/').map_or(0, |i| i + 1);
    let dot = name[last..].iter().position(|&b| b == b'.')? + last;
    let (key, ext) = (&name[..dot], &name[dot + 1..]);
    (!key.is_empty() && !ext.is_empty() && key.last() != Some(&b'/')).then_some((key, ext))
}

/// `raw` as one safe file name: `%` and `/` percent-encoded (so distinct keys stay distinct and
/// no key reaches another directory), a name of only dots encoded whole (never `.` or `..`).
/// `None` for an empty name, one with a NUL, or one too long to serve.
pub(crate) fn safe_name(raw: &[u8]) -> Option<Vec<u8>> {
    if raw.is_empty() || raw.contains(&0) {
        return None;
    }
    let mut out = Vec::with_capacity(raw.len());
    let only_dots = raw.iter().all(|&b| b == b'.');
    for &b in raw {
        match b {
            b'%' => out.extend_from_slice(b"%25"),
            b'/' => out.extend_from_slice(b"%2F"),
            b'.' if only_dots => out.extend_from_slice(b"%2E"),
            _ => out.push(b),
        }
    }
    (out.len() <= MAX_NAME).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_split_at_the_first_dot_of_their_last_component() {
        assert_eq!(split_member(b"000001.jpg"), Some((&b"000001"[..], &b"jpg"[..])));
        assert_eq!(split_member(b"a.b/x.seg.png"), Some((&b"a.b/x"[..], &b"seg.png"[..])));
        assert_eq!(split_member(b"./dir/k.cls"), Some((&b"dir/k"[..], &b"cls"[..])));
        assert_eq!(split_member(b"noext"), None);
        assert_eq!(split_member(b".jpg"), None);
        assert_eq!(split_member(b"dir/.jpg"), None);
        assert_eq!(split_member(b"x."), None);
    }

    #[test]
    fn keys_become_single_names_that_cannot_leave_their_directory() {
        assert_eq!(safe_name(b"000001").as_deref(), Some(&b"000001"[..]));
        assert_eq!(safe_name(b"../../etc/passwd").as_deref(), Some(&b"..%2F..%2Fetc%2Fpasswd"[..]));
        assert_eq!(safe_name(b"a/b").as_deref(), Some(&b"a%2Fb"[..]));
        // Distinct keys stay distinct: a key that already looks encoded is encoded again.
        assert_eq!(safe_name(b"a%2Fb").as_deref(), Some(&b"a%252Fb"[..]));
        assert_eq!(safe_name(b"..").as_deref(), Some(&b"%2E%2E"[..]));
        assert_eq!(safe_name(b".").as_deref(), Some(&b"%2E"[..]));
        assert_eq!(safe_name(b""), None);
        assert_eq!(safe_name(b"a\0b"), None);
        assert_eq!(safe_name(&[b'x'; 300]), None);
        for key in [&b"../x"[..], b"/abs", b"a/../../b", b".."] {
            let name = safe_name(key).expect("named");
            assert!(!name.contains(&b'/') && name != b"." && name != b"..", "{key:?}");
        }
    }
}
