//! Pixel work: from a sample's encoded bytes to the bytes a reader is served, with no I/O and
//! no cache. The data path calls [`pipeline`], which composes the rest.
//!
//! - [`jpeg`]: TurboJPEG header probing and the region / DCT-scaled decode.
//! - [`augment`]: torchvision's operations, their random draws, the geometry they fold into.
//! - [`pipeline`]: source bytes to output pixels (the fast path and the reference path).
//! - [`output`]: the served file in the configured format, with sizes known up front; PNG and
//!   JPEG are encoded by `encode_png` and [`encode_jpeg`].
//! - `work`: the mount's pixel work (`PixelWork`): fresh draws, timed decodes and augmentations.
//! - [`profile`]: a cold miss's pixel work stage by stage, for `examples/miss_profile.rs`.

pub mod augment;
pub mod encode_jpeg;
mod encode_png;
pub mod jpeg;
pub mod output;
pub mod pipeline;
pub mod profile;
pub(crate) mod work;
