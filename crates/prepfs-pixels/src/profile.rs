//! Where the time of one cold `augmented/` miss goes, stage by stage (issue 12), for
//! `examples/miss_profile.rs`. [`MissProfiler::serve`] is the served pixel work itself
//! (`pipeline::draw_augment_served`, what a miss runs after its source read); [`MissProfiler::staged`]
//! runs the same step functions with a clock read between them, so the stages can be held
//! against the whole. No I/O, no cache; nothing here runs while serving.

use std::io::Cursor;
use std::sync::Arc;
use std::time::Instant;

use crate::output_config::OutputConfig;
use crate::augment::{plan_sample, AugmentOp};
use crate::pipeline::{self, Codec, PixelError};
use crate::rgb::RgbRef;
use crate::output::Dest;
use crate::{jpeg, output};
use crate::served::{OutputFiles, ServedBytes};
use crate::draw::draw_rng;
use crate::rgb::Rgb;

/// Nanoseconds spent in each stage of a miss's pixel work, summed over the misses timed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StageNanos {
    /// Header probes, the checks and the draw: the plan and the region to decode.
    pub header: u64,
    /// The region / DCT-scaled decode (entropy decoding, IDCT, upsampling, colour conversion,
    /// the decode buffer).
    pub decode: u64,
    /// The antialiased resample of the crop to the output size (its buffer included).
    pub resize: u64,
    /// The horizontal flip, when drawn, and the pixel ops (colour, blur, the policies).
    pub mirror: u64,
    /// The served bytes around the pixels: the shared buffer a reader is served from (its
    /// allocation, the header; float32's normalisation).
    pub encode: u64,
}

impl StageNanos {
    /// All stages together.
    pub fn total(&self) -> u64 {
        self.header + self.decode + self.resize + self.mirror + self.encode
    }
}

/// Runs misses the way a mount with torchvision's ImageNet training pipeline does.
#[derive(Debug, Clone)]
pub struct MissProfiler {
    ops: Vec<AugmentOp>,
    output: OutputConfig,
    max_pixels: u64,
    seed: u64,
    /// Where outputs are made: in memory (`None`), or in output files of the profiler's own.
    files: Option<Arc<OutputFiles>>,
}

impl MissProfiler {
    /// A profiler for the ImageNet training pipeline (RandomResizedCrop 224, flip, normalize),
    /// writing `output`.
    pub fn imagenet(output: OutputConfig, max_pixels: u64, seed: u64) -> MissProfiler {
        MissProfiler { ops: AugmentOp::imagenet_train(), output, max_pixels, seed, files: None }
    }

    /// A profiler for any pipeline `ops` (a parsed config's `augment`), writing `output`.
    pub fn with_ops(ops: Vec<AugmentOp>, output: OutputConfig, max_pixels: u64, seed: u64) -> MissProfiler {
        MissProfiler { ops, output, max_pixels, seed, files: None }
    }

    /// Serves into output files (as a mount with kernel passthrough does), not memory.
    pub fn sealed(mut self) -> MissProfiler {
        self.files = Some(OutputFiles::new());
        self
    }

    fn dest(&self) -> Dest<'_> {
        match &self.files {
            Some(files) => Dest::File(files),
            None => Dest::Memory,
        }
    }

    /// Draw `draw` of sample `sample`, through the served path, untimed inside.
    pub fn serve(&self, sample: u64, draw: u64, bytes: &[u8]) -> Result<ServedBytes, PixelError> {
        let mut rng = draw_rng(self.seed, 0, draw, sample);
        pipeline::draw_augment_served(bytes, None, &self.ops, &mut rng, self.max_pixels, &self.output, self.dest())
    }

    /// Draw `draw` of sample `sample` from its full pixels (a decoded-cache hit, or a miss that
    /// keeps pixels), through the served path.
    pub fn serve_from_pixels(&self, sample: u64, draw: u64, full: &Rgb) -> Result<ServedBytes, PixelError> {
        let mut rng = draw_rng(self.seed, 0, draw, sample);
        pipeline::draw_augment_pixels_served(full, &self.ops, &mut rng, &self.output, self.dest())
    }

    /// The same miss as [`MissProfiler::serve`], its stages timed into `times`.
    pub fn staged(&self, sample: u64, draw: u64, bytes: &[u8], times: &mut StageNanos) -> Result<Arc<[u8]>, PixelError> {
        let mut rng = draw_rng(self.seed, 0, draw, sample);
        let mut clock = Instant::now();
        let mut lap = |slot: &mut u64| {
            let now = Instant::now();
            *slot += (now - clock).as_nanos() as u64;
            clock = now;
        };
        let size = pipeline::probe_size(Cursor::new(bytes))?;
        pipeline::check_pixels(size, self.max_pixels)?;
        let plan = plan_sample(&self.ops, size, &mut rng);
        let jpeg = Codec::sniff(bytes) == Codec::Jpeg;
        let cut = if jpeg { Some(pipeline::jpeg_cut_of(bytes, &plan, self.max_pixels)?) } else { None };
        lap(&mut times.header);
        let served = output::served(&self.output, plan.size(), |dst| {
            lap(&mut times.encode);
            match cut {
                Some(cut) => pipeline::with_decode_scratch(|buf| {
                    let part = jpeg::decode_into(bytes, cut.scale, Some(cut.region), buf)?;
                    lap(&mut times.decode);
                    let image = RgbRef { width: part.width, height: part.height, pixels: &buf[..part.len()] };
                    pipeline::resample_stages(image, part.origin, cut.crop, &plan, dst)
                })?,
                None => {
                    let full = pipeline::decode_other(bytes, self.max_pixels)?;
                    lap(&mut times.decode);
                    pipeline::resample_stages(RgbRef::of(&full), (0, 0), plan.crop, &plan, dst)?;
                }
            }
            lap(&mut times.resize);
            pipeline::after_resample(&plan, dst);
            lap(&mut times.mirror);
            Ok::<(), PixelError>(())
        })?;
        lap(&mut times.encode);
        Ok(served)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthetic::photo_jpeg;

    #[test]
    fn staged_misses_serve_the_same_bytes_as_the_served_path() {
        let profiler = MissProfiler::imagenet(OutputConfig::default(), 64_000_000, 3);
        let jpeg = photo_jpeg(500, 375, turbojpeg::Subsamp::Sub2x2);
        let mut times = StageNanos::default();
        for draw in 0..8 {
            let served = profiler.serve(7, draw, &jpeg).expect("serve");
            let staged = profiler.staged(7, draw, &jpeg, &mut times).expect("staged");
            assert_eq!(served.to_vec().expect("bytes"), &staged[..], "draw {draw}");
        }
        assert!(times.decode > 0 && times.resize > 0 && times.total() >= times.decode);
    }
}
