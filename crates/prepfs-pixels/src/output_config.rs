//! `output:`: how samples are written into the `decoded` and `augmented` views (PPM, npy, PNG or
//! JPEG, the dtype, normalisation), as plain typed data; the mount's config (prepfs-core's
//! `config/output.rs`) checks it against the augment pipeline.

use serde::{Deserialize, Serialize};


/// The serialised form of the mounted pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// Binary PPM (P6, maxval 255): PIL and torchvision read it as it is.
    Ppm,
    /// A numpy `.npy` array: uint8 HWC, or float32 CHW.
    Npy,
    /// PNG, uncompressed (stored deflate blocks): `torchvision.io.decode_image` and PIL read it.
    Png,
    /// Baseline JPEG at `quality`, padded to a size fixed by the image's size and the quality
    /// (src/pixels/encode_jpeg.rs): nvJPEG, DALI and `decode_jpeg` read it.
    Jpeg,
}

/// Element type of an `npy` output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    /// uint8, height x width x 3.
    Uint8,
    /// float32, 3 x height x width, `(x / 255 - mean) / std`.
    Float32,
}

/// How samples are written into the `decoded` and `augmented` views.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputConfig {
    #[serde(default = "OutputConfig::default_format")]
    pub format: Format,
    #[serde(default = "OutputConfig::default_dtype")]
    pub dtype: Dtype,
    #[serde(default = "OutputConfig::default_mean")]
    pub mean: [f32; 3],
    #[serde(default = "OutputConfig::default_std")]
    pub std: [f32; 3],
    /// JPEG quality, 1 to 100 (`format: jpeg` only); [`OutputConfig::DEFAULT_QUALITY`] when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quality: Option<u8>,
}

impl OutputConfig {
    fn default_format() -> Format {
        Format::Ppm
    }
    fn default_dtype() -> Dtype {
        Dtype::Uint8
    }
    fn default_mean() -> [f32; 3] {
        [0.0; 3]
    }
    fn default_std() -> [f32; 3] {
        [1.0; 3]
    }
    /// The JPEG quality when `quality` is unset.
    pub(crate) const DEFAULT_QUALITY: u8 = 90;
    /// The file name extension of this format.
    pub fn extension(&self) -> &'static str {
        match self.format {
            Format::Ppm => "ppm",
            Format::Npy => "npy",
            Format::Png => "png",
            Format::Jpeg => "jpg",
        }
    }
    /// The JPEG quality asked for.
    pub fn jpeg_quality(&self) -> u8 {
        self.quality.unwrap_or(Self::DEFAULT_QUALITY)
    }
}

impl Default for OutputConfig {
    fn default() -> Self {
        OutputConfig {
            format: Format::Ppm,
            dtype: Dtype::Uint8,
            mean: Self::default_mean(),
            std: Self::default_std(),
            quality: None,
        }
    }
}

