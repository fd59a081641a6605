//! Small types and helpers that more than one subsystem uses, kept here rather than in whichever
//! module needed them first: the forms a sample is served in, an image size, decoded pixels,
//! and the random draw of one augmentation.

use rand_pcg::Pcg64Mcg;


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

/// A width and a height in pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Size2 {
    pub width: u32,
    pub height: u32,
}

impl Size2 {
    pub(crate) fn new(width: u32, height: u32) -> Self {
        Size2 { width, height }
    }
    /// Pixels in the image.
    pub fn area(&self) -> u64 {
        u64::from(self.width) * u64::from(self.height)
    }
}

/// A decoded RGB image, 3 bytes a pixel, rows packed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rgb {
    pub width: u32,
    pub height: u32,
    pub pixels: Vec<u8>,
}


/// The random generator of one draw: a pure function of (seed, job, epoch, sample).
pub fn draw_rng(seed: u64, job: u64, epoch: u64, sample: u64) -> Pcg64Mcg {
    let mut h = splitmix64(seed ^ 0x7072_6570_6673);
    for part in [job, epoch, sample] {
        h = splitmix64(h ^ part);
    }
    Pcg64Mcg::new(u128::from(h) << 64 | u128::from(splitmix64(h)))
}

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
