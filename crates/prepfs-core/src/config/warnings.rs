//! What a valid config says that its user should hear: one output, or the decode that feeds it,
//! larger than the bound on pixel work in flight (`max_open_bytes`, `pixels::budget`). Such
//! work is refused at every open (`ENOMEM`), so the mount would serve nothing of that view;
//! `prepfs check` prints these and the mount logs them, each with both figures.

use prepfs_base::human::human_bytes;
use super::{Config, OutputConfig};
use prepfs_pixels::augment::{fixed_output_size, AugmentOp};
use prepfs_pixels::output::making_len;
use prepfs_pixels::rgb::Size2;

impl Config {
    /// The warnings of the memory bound, one line each (none for a config within it).
    pub fn memory_warnings(&self) -> Vec<String> {
        let bound = self.access.max_open_bytes;
        let fix = "make it smaller or raise max_open_bytes";
        let mut out = Vec::new();
        let pipelines = std::iter::once(("augmented/".to_string(), &self.augment[..], &self.output))
            .chain(self.recipes.iter().map(|r| (format!("{}/", prepfs_base::escape::escaped(&r.name)), &r.augment[..], &r.output)));
        for (view, augment, output) in pipelines {
            if let Some(made) = one_output(augment, output).filter(|&(_, bytes)| bytes > bound) {
                let (size, bytes) = made;
                out.push(format!(
                    "one output of {view} ({}x{} {}) takes {} to make, more than max_open_bytes ({}), the bound on pixel work in flight: every open of it is refused (ENOMEM); {fix}",
                    size.width,
                    size.height,
                    output.extension(),
                    human_bytes(bytes),
                    human_bytes(bound)
                ));
            }
        }
        // The largest image max_pixels lets through, decoded whole (the decoded/ view, a
        // region decode of it at worst), and the decoded/ file made of it.
        let decode = self.max_pixels.saturating_mul(3);
        if decode > bound {
            out.push(format!(
                "a sample of max_pixels ({} pixels) decodes to {}, more than max_open_bytes ({}), the bound on pixel work in flight: such samples are refused (ENOMEM); lower max_pixels or raise max_open_bytes",
                self.max_pixels,
                human_bytes(decode),
                human_bytes(bound)
            ));
        } else {
            let side = (self.max_pixels as f64).sqrt().ceil().max(1.0) as u32;
            let largest = Size2::new(side, (self.max_pixels.div_ceil(u64::from(side))).max(1) as u32);
            let file = making_len(&self.output, largest);
            if file > bound {
                out.push(format!(
                    "the decoded/ file of a sample of max_pixels ({} pixels, {}) takes {} to make, more than max_open_bytes ({}), the bound on pixel work in flight: such files are refused (ENOMEM); lower max_pixels or raise max_open_bytes",
                    self.max_pixels,
                    self.output.extension(),
                    human_bytes(file),
                    human_bytes(bound)
                ));
            }
        }
        out
    }
}

/// One output of a pipeline whose outputs have one size: that size and the bytes it takes to
/// make ([`making_len`]); `None` where the size follows the image (no fixed crop or resize).
fn one_output(augment: &[AugmentOp], output: &OutputConfig) -> Option<(Size2, u64)> {
    let size = fixed_output_size(augment)?;
    Some((size, making_len(output, size)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Overrides;

    fn config(yaml: &str) -> Config {
        let dir = tempfile::tempdir().expect("tempdir");
        let overrides = Overrides { source: Some(dir.path().to_path_buf()), mountpoint: Some("/mnt/prepfs-warnings".into()), seed: None };
        Config::parse(yaml, &overrides).expect("a valid config")
    }

    #[test]
    fn the_shipped_defaults_warn_of_nothing() {
        assert_eq!(config("").memory_warnings(), Vec::<String>::new());
        assert!(config("augment: [ {random_resized_crop: {size: 224}} ]\noutput: {format: npy}\n").memory_warnings().is_empty());
    }

    #[test]
    fn a_giant_output_is_warned_of_with_both_figures() {
        let c = config("augment: [ {random_resized_crop: {size: 16384}} ]\ncache: {memory: 0}\n");
        let warnings = c.memory_warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        let w = &warnings[0];
        // 16384 x 16384 x 3 + the PPM header; max_open_bytes' default, 256 MiB.
        assert!(w.contains("augmented/ (16384x16384 ppm)") && w.contains("768.0 MiB") && w.contains("256.0 MiB"), "{w}");
        // A recipe's too, by its view's name; raised max_open_bytes lets it through.
        let c = config("max_open_bytes: 512MiB\nrecipes: { big: { augment: [ {resize: {size: 16384}}, {center_crop: {size: 16384}} ] } }\n");
        let warnings = c.memory_warnings();
        assert!(warnings.len() == 1 && warnings[0].contains("big/ (16384x16384 ppm)") && warnings[0].contains("512.0 MiB"), "{warnings:?}");
        assert!(config("max_open_bytes: 1GiB\naugment: [ {random_resized_crop: {size: 16384}} ]\n").memory_warnings().is_empty());
    }

    #[test]
    fn a_decode_or_decoded_file_larger_than_the_bound_is_warned_of() {
        let c = config("max_open_bytes: 100MiB\n");
        let warnings = c.memory_warnings();
        assert!(warnings.len() == 1 && warnings[0].contains("64000000 pixels") && warnings[0].contains("183.1 MiB"), "{warnings:?}");
        // float32 npy: the decoded/ file of the largest image is four times its pixels.
        let c = config("output: {format: npy, dtype: float32}\n");
        let warnings = c.memory_warnings();
        assert!(warnings.len() == 1 && warnings[0].contains("decoded/ file") && warnings[0].contains("npy"), "{warnings:?}");
        assert!(config("max_pixels: 16000000\noutput: {format: npy, dtype: float32}\n").memory_warnings().is_empty());
    }
}
