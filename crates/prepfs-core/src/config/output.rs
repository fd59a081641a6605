//! `output:`'s checks: the output settings and the augment pipeline fit together (the settings
//! themselves are prepfs-pixels' `OutputConfig`).

use super::error::ConfigError;
use prepfs_pixels::augment::AugmentOp;
use prepfs_pixels::output_config::{Dtype, Format, OutputConfig};

/// Folds a `normalize` op into the output settings and checks they fit together.
pub(super) fn validate_output(
    text: &str,
    output: &mut OutputConfig,
    augment: &[AugmentOp],
) -> Result<(), ConfigError> {
    if let Err((i, why)) = prepfs_pixels::augment::check_order(augment) {
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
    prepfs_pixels::augment::fixed_output_size(augment).is_none()
}
