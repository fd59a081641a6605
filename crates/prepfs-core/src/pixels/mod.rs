//! Pixel work: from a sample's encoded bytes to the bytes a reader is served, with no I/O and
//! no cache. The data path calls [`pipeline`], which composes the rest.
//!
//! - [`jpeg`]: TurboJPEG header probing and the region / DCT-scaled decode.
//! - [`augment`]: torchvision's operations, their random draws, the geometry they fold into.
//! - [`interpolation`]: `resize`'s and `random_resized_crop`'s filters (bilinear, bicubic, random).
//! - [`pixel_ops`]: the ops on the output's pixels (their arguments, draws and order), made of
//!   [`color`] (`color_jitter`, `random_grayscale`), [`blur`] (`gaussian_blur`), [`erasing`]
//!   (`random_erasing`) and [`autoaugment`] (the policies), which uses [`affine`] and [`tone`].
//! - [`pipeline`]: source bytes to output pixels (the fast path and the reference path).
//! - [`output`]: the served file in the configured format, with sizes known up front; PNG and
//!   JPEG are encoded by `encode_png` and [`encode_jpeg`].
//! - `work`: the mount's pixel work (`PixelWork`): fresh draws, timed decodes and augmentations,
//!   each within the bound on pixel work in flight (`budget`).
//! - [`profile`]: a cold miss's pixel work stage by stage, for `examples/miss_profile.rs`.

mod affine;
pub(crate) mod augment;
pub(crate) mod autoaugment;
pub mod budget;
pub(crate) mod blur;
pub(crate) mod color;
pub(crate) mod erasing;
pub(crate) mod interpolation;
mod normal;
mod pil_warp;
pub(crate) mod pixel_ops;
pub(crate) mod timm_rand;
mod tone;
pub(crate) mod encode_jpeg;
mod encode_png;
pub mod jpeg;
pub mod output;
pub mod pipeline;
pub mod profile;
pub(crate) mod work;
