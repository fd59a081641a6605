//! `output:`: how samples are written into the `decoded` and `augmented` views (PPM or npy, the
//! dtype, normalisation), and the checks that the output and the augment pipeline fit together.

use serde::{Deserialize, Serialize};

use super::error::ConfigError;
use crate::pixels::augment::AugmentOp;

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
    pub(crate) fn extension(&self) -> &'static str {
        match self.format {
            Format::Ppm => "ppm",
            Format::Npy => "npy",
            Format::Png => "png",
            Format::Jpeg => "jpg",
        }
    }
    /// The JPEG quality asked for.
    pub(crate) fn jpeg_quality(&self) -> u8 {
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

/// Folds a `normalize` op into the output settings and checks they fit together.
pub(super) fn validate_output(
    text: &str,
    output: &mut OutputConfig,
    augment: &[AugmentOp],
) -> Result<(), ConfigError> {
    if let Err((i, why)) = crate::pixels::pixel_ops::check_order(augment) {
        let name = augment.get(i).map_or("augment", AugmentOp::name);
        return Err(ConfigError::at(text, name, format!("augment[{i}]: {why}")));
    }
    for op in augment {
        if let AugmentOp::Normalize { mean, std } = op {
            if output.format != Format::Npy || output.dtype != Dtype::Float32 {
                return Err(ConfigError::at(
                    text,
                    "normalize",
                    "needs `output: {format: npy, dtype: float32}`",
                ));
            }
            output.mean = *mean;
            output.std = *std;
        }
    }
    if output.std.iter().any(|s| !(*s > 0.0 && s.is_finite())) {
        return Err(ConfigError::at(text, "std", "every value must be positive"));
    }
    if output.mean.iter().any(|m| !m.is_finite()) {
        return Err(ConfigError::at(text, "mean", "every value must be a finite number"));
    }
    let normalizes = output.mean != [0.0; 3] || output.std != [1.0; 3];
    if normalizes && (output.format != Format::Npy || output.dtype != Dtype::Float32) {
        return Err(ConfigError::at(
            text,
            "mean",
            "mean/std apply to `format: npy` with `dtype: float32` only",
        ));
    }
    if output.format != Format::Npy && output.dtype != Dtype::Uint8 {
        let why = format!("{} output is uint8; use `format: npy`", output.extension());
        return Err(ConfigError::at(text, "dtype", &why));
    }
    match output.quality {
        Some(_) if output.format != Format::Jpeg => {
            return Err(ConfigError::at(text, "quality", "applies to `format: jpeg` only"));
        }
        Some(q) if !(1..=100).contains(&q) => {
            return Err(ConfigError::at(text, "quality", "must be 1 to 100"));
        }
        _ => {}
    }
    if fixed_size_missing(augment) {
        return Err(ConfigError::at(
            text,
            "augment",
            "the pipeline must end in a fixed size (random_resized_crop, center_crop or \
             resize to [h, w]) so every augmented file has one exact size",
        ));
    }
    Ok(())
}

fn fixed_size_missing(augment: &[AugmentOp]) -> bool {
    crate::pixels::augment::fixed_output_size(augment).is_none()
}
