//! Pixel work: from a sample's encoded bytes to the bytes a reader is served, with no I/O of
//! the source's and no cache (prepfs-pixels depends on prepfs-base alone). The data path calls [`pipeline`], which composes the rest.
//!
//! - [`jpeg`]: TurboJPEG header probing and the region / DCT-scaled decode.
//! - [`augment`]: torchvision's operations, their random draws, the geometry they fold into;
//!   [`crop_padding`] is `random_crop`'s padding.
//! - [`interpolation`]: `resize`'s and `random_resized_crop`'s filters (bilinear, bicubic, random).
//! - [`pixel_ops`]: the ops on the output's pixels (their arguments, draws and order), made of
//!   [`color`] (`color_jitter`, `random_grayscale`), [`blur`] (`gaussian_blur`), [`erasing`]
//!   (`random_erasing`), [`rotation`] (`random_rotation`) and [`autoaugment`] (the policies),
//!   which uses [`affine`] and [`tone`].
//! - [`pipeline`]: source bytes to output pixels (the fast path and the reference path).
//! - [`output`]: the served file in the configured format, with sizes known up front; PNG and
//!   JPEG are encoded by `encode_png` and [`encode_jpeg`].
//! - [`budget`]: the bound on pixel work in flight (`max_open_bytes`), which prepfs-core's
//!   `pixel_work` reserves from before each decode.
//! - [`served`]: an output's bytes as they are kept and served: in memory, or in a file of their
//!   own that the kernel reads directly (passthrough).
//! - [`rgb`], [`draw`], [`output_config`]: an image's size and pixels, the random generator
//!   of one draw, and the `output:` settings as plain data.
//! - [`synthetic`]: photo-like JPEGs for tests and benchmarks.
//! - [`profile`]: a cold miss's pixel work stage by stage, for `examples/miss_profile.rs`.

// A buffer's `len` is its size in bytes, never asked whether it is empty (a served output, a
// decoded part and an output file always hold bytes).
#![allow(clippy::len_without_is_empty)]

mod affine;
pub mod augment;
pub mod autoaugment;
pub mod budget;
pub mod blur;
pub mod color;
pub mod crop_padding;
pub mod erasing;
pub mod interpolation;
mod normal;
mod pil_warp;
pub mod pixel_ops;
pub mod rotation;
pub mod op_args;
pub mod timm_rand;
mod tone;
pub mod encode_jpeg;
mod encode_png;
pub mod jpeg;
pub mod output;
pub mod pipeline;
pub mod profile;
pub mod served;
pub mod rgb;
pub mod draw;
pub mod output_config;
pub mod synthetic;
