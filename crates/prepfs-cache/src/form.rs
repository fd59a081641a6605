//! Small types and helpers that more than one subsystem uses, kept here rather than in whichever
//! module needed them first: the forms a sample is served in, a sample's rank in a view, and
//! where a served sample came from.



/// The three forms a sample is served in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Form {
    /// The source bytes, byte for byte.
    Encoded,
    /// The full-resolution RGB decode.
    Decoded,
    /// A fresh augmentation at every open.
    Augmented,
}

impl Form {
    pub const ALL: [Form; 3] = [Form::Encoded, Form::Decoded, Form::Augmented];

    /// The view's directory name.
    pub fn dir_name(self) -> &'static str {
        match self {
            Form::Encoded => "encoded",
            Form::Decoded => "decoded",
            Form::Augmented => "augmented",
        }
    }

    /// The form's number in inode numbers.
    pub fn index(self) -> u64 {
        match self {
            Form::Encoded => 0,
            Form::Decoded => 1,
            Form::Augmented => 2,
        }
    }

    /// The form numbered `i` by [`Form::index`].
    pub fn from_index(i: u64) -> Option<Form> {
        Form::ALL.get(i as usize).copied()
    }

    /// The best [`crate::SampleCache::rank`] a sample can have in this form's view.
    pub fn top_rank(self) -> Rank {
        match self {
            Form::Encoded => 1,
            Form::Decoded => 2,
            Form::Augmented => 3,
        }
    }
}

/// A preference for a sample in some view: 0 not cached, higher is cheaper to serve (what
/// sampling orders and substitutes by).
pub type Rank = u8;

/// Where an output came from: the cache form that held the sample, the disk tier, the remote
/// tier, or the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Augmented,
    Decoded,
    Encoded,
    Disk,
    Remote,
    Source,
}

impl Origin {
    /// Whether serving it read the sample from outside memory (a miss).
    pub fn is_miss(self) -> bool {
        matches!(self, Origin::Disk | Origin::Remote | Origin::Source)
    }
}
