//! Small types and helpers that more than one subsystem uses, kept here rather than in whichever
//! module needed them first: the forms a sample is served in, and a sample's rank in a view.



/// The three forms a sample is served in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Form {
    /// The source bytes, byte for byte.
    Encoded,
    /// The full-resolution RGB decode.
    Decoded,
    /// A fresh augmentation at every open.
    Augmented,
}

impl Form {
    pub(crate) const ALL: [Form; 3] = [Form::Encoded, Form::Decoded, Form::Augmented];

    /// The view's directory name.
    pub(crate) fn dir_name(self) -> &'static str {
        match self {
            Form::Encoded => "encoded",
            Form::Decoded => "decoded",
            Form::Augmented => "augmented",
        }
    }

    /// The form's number in inode numbers.
    pub(crate) fn index(self) -> u64 {
        match self {
            Form::Encoded => 0,
            Form::Decoded => 1,
            Form::Augmented => 2,
        }
    }

    /// The form numbered `i` by [`Form::index`].
    pub(crate) fn from_index(i: u64) -> Option<Form> {
        Form::ALL.get(i as usize).copied()
    }

    /// The best [`crate::cache::SampleCache::rank`] a sample can have in this form's view.
    pub(crate) fn top_rank(self) -> Rank {
        match self {
            Form::Encoded => 1,
            Form::Decoded => 2,
            Form::Augmented => 3,
        }
    }
}

/// A preference for a sample in some view: 0 not cached, higher is cheaper to serve (what
/// sampling orders and substitutes by).
pub(crate) type Rank = u8;
