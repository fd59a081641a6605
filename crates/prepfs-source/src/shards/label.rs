//! A sample's class as its shard says it: `KEY.cls` (a number or a name, as text) or
//! `KEY.json` (its `class`, else `label`, field), and the class directory it is served under.

use super::names::safe_name;

/// The most bytes of a label member read (a `.cls` or `.json` larger is unreadable).
pub(crate) const MAX_LABEL_BYTES: u64 = 64 << 10;

/// The class directory of samples whose key has no label member (said in docs/sources.md).
pub(crate) const UNLABELED: &str = "_unlabeled";

/// A sample's class.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Label {
    /// No `.cls` and no `.json` with a class: served under [`UNLABELED`].
    None,
    /// A class number: served zero-padded to the widest number of the set, so that the class
    /// directories sort (as `ImageFolder` numbers them) in the order of their numbers.
    Number(u64),
    /// A class name: served as it is, made a safe name.
    Name(Vec<u8>),
}

/// The label a `.cls` member's bytes say.
pub(crate) fn of_cls(bytes: &[u8]) -> Result<Label, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "a .cls that is not UTF-8 text".to_string())?.trim();
    of_text(text).ok_or_else(|| "an empty .cls".to_string())
}

/// The label a `.json` member's bytes say: its `class` field, else its `label` field, a number
/// or a string; [`Label::None`] when it has neither.
pub(crate) fn of_json(bytes: &[u8]) -> Result<Label, String> {
    let value: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| format!("a .json that does not parse ({e})"))?;
    let Some(field) = value.get("class").or_else(|| value.get("label")) else { return Ok(Label::None) };
    match field {
        serde_json::Value::Number(n) => n.as_u64().map(Label::Number).ok_or_else(|| format!("a class number that is not a whole number ≥ 0 ({n})")),
        serde_json::Value::String(s) => of_text(s.trim()).ok_or_else(|| "an empty class name".to_string()),
        other => Err(format!("a class that is neither a number nor a name ({other})")),
    }
}

fn of_text(text: &str) -> Option<Label> {
    if text.is_empty() {
        return None;
    }
    match text.parse::<u64>() {
        Ok(n) if text.bytes().all(|b| b.is_ascii_digit()) => Some(Label::Number(n)),
        _ => Some(Label::Name(text.as_bytes().to_vec())),
    }
}

/// How class directories are named across a set: numbers padded to `width` digits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Naming {
    width: usize,
}

impl Naming {
    /// The naming of a set whose labels are `labels`.
    pub fn of<'a>(labels: impl Iterator<Item = &'a Label>) -> Naming {
        let widest = labels.filter_map(|l| match l {
            Label::Number(n) => Some(*n),
            _ => None,
        });
        Naming { width: widest.max().map_or(1, |n| n.to_string().len()) }
    }

    /// The directory a label's samples are served in; `None` for a name that cannot be one.
    pub fn dir(&self, label: &Label) -> Option<Vec<u8>> {
        match label {
            Label::None => Some(UNLABELED.as_bytes().to_vec()),
            Label::Number(n) => Some(format!("{n:0width$}", width = self.width).into_bytes()),
            Label::Name(name) => safe_name(name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cls_is_a_number_or_a_name_and_a_json_its_class_or_label_field() {
        assert_eq!(of_cls(b"7\n"), Ok(Label::Number(7)));
        assert_eq!(of_cls(b" tabby cat "), Ok(Label::Name(b"tabby cat".to_vec())));
        assert_eq!(of_cls(b"-3"), Ok(Label::Name(b"-3".to_vec())));
        assert!(of_cls(b"  \n").is_err());
        assert!(of_cls(&[0xff, 0xfe]).is_err());
        assert_eq!(of_json(br#"{"class": 3, "label": 9}"#), Ok(Label::Number(3)));
        assert_eq!(of_json(br#"{"label": "dog"}"#), Ok(Label::Name(b"dog".to_vec())));
        assert_eq!(of_json(br#"{"label": "12"}"#), Ok(Label::Number(12)));
        assert_eq!(of_json(br#"{"caption": "a dog"}"#), Ok(Label::None));
        assert!(of_json(b"{not json").is_err());
        assert!(of_json(br#"{"class": -1}"#).is_err());
        assert!(of_json(br#"{"class": [1]}"#).is_err());
    }

    #[test]
    fn class_numbers_are_padded_so_their_directories_sort_in_number_order() {
        let labels = [Label::Number(2), Label::Number(10), Label::Name(b"../x".to_vec()), Label::None];
        let naming = Naming::of(labels.iter());
        let dirs: Vec<Vec<u8>> = labels.iter().map(|l| naming.dir(l).expect("named")).collect();
        assert_eq!(dirs, [b"02".to_vec(), b"10".to_vec(), b"..%2Fx".to_vec(), UNLABELED.as_bytes().to_vec()]);
        assert_eq!(Naming::of([Label::Number(0)].iter()).dir(&Label::Number(0)), Some(b"0".to_vec()));
    }
}
