//! The decode/augment pipeline: from a sample's source bytes to the pixels of its `decoded` or
//! `augmented` file.
//!
//! JPEG goes through TurboJPEG with the fast path (Pecan's lesson: reduce data before doing
//! expensive work): only the region of the crop is decoded, and when the crop will be shrunk
//! anyway the DCT downscales it by 1/2, 1/4 or 1/8 first. Everything else goes through `image`.
//! Then one antialiased bilinear resample (`fast_image_resize`, Pillow's algorithm) takes the
//! crop to the output size, and the mirror is applied. [`augment_reference`] is the
//! straightforward path (full decode, crop, resize) the fast path is held against.
//!
//! The served path ([`augment_served`]) copies nothing it can avoid: the region is decoded into
//! the thread's reused scratch buffer, resampled straight into the shared buffer a reader is
//! served from (after the format's header, `output::served`), and mirrored there in place.
//!
//! A sample that cannot become pixels is a [`PixelError`] saying why (`EIO` to a reader).

use std::cell::RefCell;
use std::io::{self, BufRead, Cursor, Seek};
use std::sync::Arc;

use fast_image_resize::images::{Image, ImageRef};
use fast_image_resize::{PixelType, ResizeAlg, ResizeOptions, Resizer};

use crate::output_config::OutputConfig;
use prepfs_base::errno::ToErrno;
use crate::augment::{plan_sample, AugmentOp, Rect, Resample, SamplePlan};
use crate::crop_padding;
use crate::rgb::RgbRef;
use crate::interpolation::Filter;
use crate::pixel_ops;
use crate::jpeg::{self, JpegError, Region, Scale};
use crate::output::{self, Dest};
use crate::served::ServedBytes;
use crate::rgb::Rgb;
use crate::rgb::Size2;

/// Why a sample's bytes could not be turned into pixels. Every one is `EIO` to a reader (the
/// sample is damaged, unsupported or too big, not missing); the messages are the log line's.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PixelError {
    /// The JPEG decoder refused it.
    #[error(transparent)]
    Jpeg(#[from] JpegError),
    /// An empty file.
    #[error("empty file")]
    Empty,
    /// Bytes of no format prepfs decodes.
    #[error("not an image (unknown format)")]
    UnknownFormat,
    /// `image` refused it (PNG, BMP, GIF, WebP, TIFF, PNM: corrupt, truncated, unsupported).
    #[error("{0}")]
    Image(Arc<image::ImageError>),
    /// Reading the bytes failed (the reader's error, not the data's).
    #[error("{0}")]
    Read(Arc<io::Error>),
    /// The header claims more than `max_pixels`; refused before any pixel memory is allocated.
    #[error("{}x{} is {} pixels, over the limit of {max_pixels} (max_pixels)", .size.width, .size.height, .size.area())]
    TooManyPixels { size: Size2, max_pixels: u64 },
    /// The bound on pixel work in flight refused the work (`ENOMEM`): the sample is not at
    /// fault, and the producer does not mark it bad.
    #[error(transparent)]
    Refused(#[from] crate::budget::WorkRefused),
    /// The resampler refused the image buffer.
    #[error("resample: {0}")]
    ResampleBuffer(#[from] fast_image_resize::ImageBufferError),
    /// The resampler refused the crop or the sizes.
    #[error("resample: {0}")]
    Resample(#[from] fast_image_resize::ResizeError),
    /// The output format's encoder could not make the file (`format: jpeg`).
    #[error(transparent)]
    Encode(#[from] crate::encode_jpeg::EncodeError),
}

impl ToErrno for PixelError {
    fn to_errno(&self) -> libc::c_int {
        match self {
            PixelError::Jpeg(e) => e.to_errno(),
            PixelError::Refused(_) => libc::ENOMEM,
            _ => libc::EIO,
        }
    }
}

impl From<image::ImageError> for PixelError {
    fn from(e: image::ImageError) -> Self {
        PixelError::Image(Arc::new(e))
    }
}

impl From<io::Error> for PixelError {
    fn from(e: io::Error) -> Self {
        PixelError::Read(Arc::new(e))
    }
}

/// The DCT may shrink the crop only while the shrunk crop keeps at least this many times the
/// output's pixels per side: the resample that follows stays a downscale, and the result
/// stays within [`FAST_PATH_TOLERANCE`] of the straightforward path.
pub(crate) const DCT_SCALE_MARGIN: f64 = 1.0;

/// A fresh augmentation of encoded bytes with the draws of `rng`, as served: the cold
/// `augmented/` miss's pixel work from source bytes to the bytes a reader gets (the header
/// probed here unless `size` says it was).
/// prepfs-core's `PixelWork::decode_augment` times it; `profile` runs it too.
pub fn draw_augment_served(
    bytes: &[u8],
    size: Option<Size2>,
    ops: &[AugmentOp],
    rng: &mut impl rand::Rng,
    max_pixels: u64,
    out: &OutputConfig,
    dest: Dest<'_>,
) -> Result<ServedBytes, PixelError> {
    let size = match size {
        Some(size) => size,
        None => probe_size(std::io::Cursor::new(bytes))?,
    };
    check_pixels(size, max_pixels)?;
    let plan = plan_sample(ops, size, rng);
    augment_served(bytes, &plan, max_pixels, out, dest)
}

/// A fresh augmentation of full pixels with the draws of `rng`, as served: a decoded-cache hit's
/// (or a miss that kept pixels) pixel work. prepfs-core's `PixelWork::augment_pixels` times it;
/// `profile` runs it too.
pub fn draw_augment_pixels_served(
    pixels: &Rgb,
    ops: &[AugmentOp],
    rng: &mut impl rand::Rng,
    out: &OutputConfig,
    dest: Dest<'_>,
) -> Result<ServedBytes, PixelError> {
    let plan = plan_sample(ops, Size2::new(pixels.width, pixels.height), rng);
    augment_pixels_served(pixels, &plan, out, dest)
}

/// The mean absolute difference per channel (8-bit values) that the fast path may add against
/// [`augment_reference`]; tests hold it.
#[cfg(test)]
pub(crate) const FAST_PATH_TOLERANCE: f64 = 3.0;

/// What a sample's bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    Jpeg,
    /// PNG, BMP, GIF, WebP, TIFF: decoded by `image`.
    Other,
}

impl Codec {
    /// Sniffs the codec from the first bytes, whatever the file name says.
    pub fn sniff(bytes: &[u8]) -> Codec {
        if bytes.starts_with(&[0xFF, 0xD8]) {
            Codec::Jpeg
        } else {
            Codec::Other
        }
    }
}

/// The size in pixels a sample's header claims, reading only the header (JPEG marker segments,
/// or what `image` needs for other formats).
pub fn probe_size(mut reader: impl BufRead + Seek) -> Result<Size2, PixelError> {
    let head = reader.fill_buf()?;
    let (codec, empty) = (Codec::sniff(head), head.is_empty());
    if codec == Codec::Jpeg {
        let info = jpeg::probe(reader)?;
        return Ok(Size2::new(info.width, info.height));
    }
    let reader = image::ImageReader::new(reader).with_guessed_format()?;
    if reader.format().is_none() {
        return Err(if empty { PixelError::Empty } else { PixelError::UnknownFormat });
    }
    let (w, h) = reader.into_dimensions()?;
    Ok(Size2::new(w, h))
}

/// Refuses a header that claims too many pixels, before any pixel memory is allocated.
pub fn check_pixels(size: Size2, max_pixels: u64) -> Result<(), PixelError> {
    if size.area() > max_pixels {
        return Err(PixelError::TooManyPixels { size, max_pixels });
    }
    Ok(())
}

/// The full-resolution RGB decode (the `decoded` view).
pub fn decode_full(bytes: &[u8], max_pixels: u64) -> Result<Rgb, PixelError> {
    match Codec::sniff(bytes) {
        Codec::Jpeg => {
            let info = jpeg::probe(bytes)?;
            check_pixels(Size2::new(info.width, info.height), max_pixels)?;
            Ok(jpeg::decode(bytes, Scale::One, None)?.image)
        }
        Codec::Other => decode_other(bytes, max_pixels),
    }
}

pub(crate) fn decode_other(bytes: &[u8], max_pixels: u64) -> Result<Rgb, PixelError> {
    let size = probe_size(Cursor::new(bytes))?;
    check_pixels(size, max_pixels)?;
    let mut reader = image::ImageReader::new(Cursor::new(bytes)).with_guessed_format()?;
    let mut limits = image::Limits::default();
    limits.max_alloc = Some(max_pixels.saturating_mul(16));
    reader.limits(limits);
    let decoded = reader.decode()?;
    // PIL's convert("RGB") drops alpha without compositing; so does into_rgb8, which keeps an
    // image already RGB8 (most PNGs) as it is where to_rgb8 copied it.
    let rgb = decoded.into_rgb8();
    Ok(Rgb { width: rgb.width(), height: rgb.height(), pixels: rgb.into_raw() })
}

/// The augmented pixels of one sample for `plan`, by the fast path (the tests' view of it; the
/// mount serves [`augment_served`]).
#[cfg(test)]
pub fn augment(bytes: &[u8], plan: &SamplePlan, max_pixels: u64) -> Result<Rgb, PixelError> {
    let size = plan.size();
    let mut pixels = vec![0u8; size.area() as usize * 3];
    augment_into(bytes, plan, max_pixels, &mut pixels)?;
    Ok(Rgb { width: size.width, height: size.height, pixels })
}

/// The served bytes (header and pixels, in `output`'s format) of one sample for `plan`, by the
/// fast path: the region is decoded into this thread's scratch buffer and resampled straight
/// into the buffer a reader is served from; nothing else is allocated or copied.
pub fn augment_served(
    bytes: &[u8],
    plan: &SamplePlan,
    max_pixels: u64,
    output: &OutputConfig,
    dest: Dest<'_>,
) -> Result<ServedBytes, PixelError> {
    output::served_erased(output, plan.size(), dest, plan.erase.as_ref(), |dst| augment_into(bytes, plan, max_pixels, dst))
}

/// [`augment`] into `dst`: the plan's output size, packed RGB rows (the erasing is the
/// output's).
pub(crate) fn augment_into(bytes: &[u8], plan: &SamplePlan, max_pixels: u64, dst: &mut [u8]) -> Result<(), PixelError> {
    match Codec::sniff(bytes) {
        Codec::Jpeg => {
            let cut = jpeg_cut_of(bytes, plan, max_pixels)?;
            with_decode_scratch(|buf| {
                let part = jpeg::decode_into(bytes, cut.scale, Some(cut.region), buf)?;
                let image = RgbRef { width: part.width, height: part.height, pixels: &buf[..part.len()] };
                resample_stages(image, part.origin, cut.crop, plan, dst)
            })?;
        }
        Codec::Other => {
            let full = decode_other(bytes, max_pixels)?;
            resample_stages(RgbRef::of(&full), (0, 0), plan.crop, plan, dst)?;
        }
    }
    after_resample(plan, dst);
    Ok(())
}

/// The plan's resamples: `crop` of `image` (at `origin`) to the first output, then each further
/// resample of the previous one's output; the last into `dst`.
pub(crate) fn resample_stages(image: RgbRef<'_>, origin: (u32, u32), crop: Rect, plan: &SamplePlan, dst: &mut [u8]) -> Result<(), PixelError> {
    let Some((last, between)) = plan.then.split_last() else {
        return resample_into(image, origin, crop, plan.out, plan.filter, dst);
    };
    let mut cur = vec![0u8; plan.out.area() as usize * 3];
    resample_into(image, origin, crop, plan.out, plan.filter, &mut cur)?;
    let mut size = plan.out;
    for stage in between {
        let mut next = vec![0u8; stage.out.area() as usize * 3];
        run_stage(RgbRef { width: size.width, height: size.height, pixels: &cur }, stage, &mut next)?;
        (cur, size) = (next, stage.out);
    }
    run_stage(RgbRef { width: size.width, height: size.height, pixels: &cur }, last, dst)
}

/// One resample after the first, of the whole previous output `image`; padded first where the
/// stage says (a window that is the crop's size exactly is copied straight from the image
/// through the padding, nothing else materialised).
fn run_stage(image: RgbRef<'_>, stage: &Resample, dst: &mut [u8]) -> Result<(), PixelError> {
    let Some(pad) = stage.pad else {
        return resample_into(image, (0, 0), stage.crop, stage.out, stage.filter, dst);
    };
    let [l, t, _, _] = pad.sides;
    let c = stage.crop;
    let whole_pixels = [c.x, c.y, c.width, c.height].iter().all(|v| v.fract() == 0.0);
    if whole_pixels && stage.out == Size2::new(c.width as u32, c.height as u32) {
        let (x, y) = (c.x as i64 - i64::from(l), c.y as i64 - i64::from(t));
        crop_padding::pad_window(image, &pad, x, y, stage.out.width, stage.out.height, dst);
        return Ok(());
    }
    let padded = pad.padded(Size2::new(image.width, image.height));
    let mut full = vec![0u8; padded.area() as usize * 3];
    crop_padding::pad_window(image, &pad, -i64::from(l), -i64::from(t), padded.width, padded.height, &mut full);
    let full = RgbRef { width: padded.width, height: padded.height, pixels: &full };
    resample_into(full, (0, 0), c, stage.out, stage.filter, dst)
}

/// What follows the resamples on the output's pixels: the mirror, then the pixel ops.
pub(crate) fn after_resample(plan: &SamplePlan, dst: &mut [u8]) {
    let size = plan.size();
    if plan.flip {
        mirror_rows(dst, size.width as usize);
    }
    pixel_ops::apply(&plan.pixels, size, dst);
}

/// Augments already-decoded full-resolution pixels (a decoded-cache hit): crop, resize, mirror
/// (the tests' view; the mount serves [`augment_pixels_served`]).
#[cfg(test)]
pub fn augment_pixels(full: &Rgb, plan: &SamplePlan) -> Result<Rgb, PixelError> {
    finish(full, (0, 0), plan.crop, plan)
}

/// [`augment_pixels`] as served bytes, resampled straight into the served buffer.
pub fn augment_pixels_served(full: &Rgb, plan: &SamplePlan, output: &OutputConfig, dest: Dest<'_>) -> Result<ServedBytes, PixelError> {
    output::served_erased(output, plan.size(), dest, plan.erase.as_ref(), |dst| {
        resample_stages(RgbRef::of(full), (0, 0), plan.crop, plan, dst)?;
        after_resample(plan, dst);
        Ok(())
    })
}

/// The straightforward path: decode everything at full size, then crop and resize.
#[cfg(test)]
pub(crate) fn augment_reference(bytes: &[u8], plan: &SamplePlan, max_pixels: u64) -> Result<Rgb, PixelError> {
    let full = decode_full(bytes, max_pixels)?;
    finish(&full, (0, 0), plan.crop, plan)
}

/// The coarsest DCT scale that keeps the crop at least [`DCT_SCALE_MARGIN`] times the output.
pub(crate) fn dct_scale_for(crop: Rect, out: Size2) -> Scale {
    let fits = |s: Scale| {
        let d = f64::from(s.denom());
        crop.width / d >= f64::from(out.width) * DCT_SCALE_MARGIN
            && crop.height / d >= f64::from(out.height) * DCT_SCALE_MARGIN
    };
    [Scale::Eighth, Scale::Quarter, Scale::Half].into_iter().find(|s| fits(*s)).unwrap_or(Scale::One)
}

/// The [`JpegCut`] of a JPEG for `plan`, from its header; refuses one over `max_pixels`.
pub(crate) fn jpeg_cut_of(bytes: &[u8], plan: &SamplePlan, max_pixels: u64) -> Result<JpegCut, PixelError> {
    let info = jpeg::probe(bytes)?;
    let source = Size2::new(info.width, info.height);
    check_pixels(source, max_pixels)?;
    Ok(jpeg_cut(source, plan))
}

thread_local! {
    /// The region decode's output, reused by every decode on this thread (see
    /// [`with_decode_scratch`]).
    static DECODE_SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Runs `work` with this thread's decode buffer: reused from one miss to the next, so a region
/// decode allocates and zeroes nothing once the thread has met its largest region; one grown
/// past [`output::KEEP_SCRATCH_BYTES`] (a huge image) is freed afterwards.
pub(crate) fn with_decode_scratch<T>(work: impl FnOnce(&mut Vec<u8>) -> Result<T, PixelError>) -> Result<T, PixelError> {
    DECODE_SCRATCH.with(|cell| {
        let mut buf = cell.borrow_mut();
        let result = work(&mut buf);
        if buf.capacity() > output::KEEP_SCRATCH_BYTES {
            *buf = Vec::new();
        }
        result
    })
}

/// What of a JPEG a plan needs decoded: the DCT scale, the crop in the scaled image's
/// coordinates, and the region to decode (the crop plus the resampling filter's reach).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JpegCut {
    pub scale: Scale,
    pub crop: Rect,
    pub region: Region,
}

/// The [`JpegCut`] of a `source`-sized JPEG for `plan`.
pub fn jpeg_cut(source: Size2, plan: &SamplePlan) -> JpegCut {
    let scale = dct_scale_for(plan.crop, plan.out);
    let d = f64::from(scale.denom());
    let crop = Rect {
        x: plan.crop.x / d,
        y: plan.crop.y / d,
        width: plan.crop.width / d,
        height: plan.crop.height / d,
    };
    // Decode the crop plus the resampling filter's reach on each side (Pillow's filter taps
    // extend past a crop box into the image), so the region resamples as the whole image would.
    let reach = (crop.width / f64::from(plan.out.width)).max(crop.height / f64::from(plan.out.height)).max(1.0) + 1.0;
    let (sw, sh) = (scale.apply(source.width), scale.apply(source.height));
    let x0 = (crop.x - reach).floor().max(0.0) as u32;
    let y0 = (crop.y - reach).floor().max(0.0) as u32;
    let x1 = ((crop.x + crop.width + reach).ceil() as u32).min(sw);
    let y1 = ((crop.y + crop.height + reach).ceil() as u32).min(sh);
    let region = Region { x: x0, y: y0, width: x1.saturating_sub(x0), height: y1.saturating_sub(y0) };
    JpegCut { scale, crop, region }
}

thread_local! {
    static RESIZER: RefCell<Resizer> = RefCell::new(Resizer::new());
}

/// Resamples `crop` (in the coordinates of the image `image` is a part of, `image` sitting at
/// `origin`) to the plan's output size, then mirrors if the plan says so.
#[cfg(test)]
fn finish(image: &Rgb, origin: (u32, u32), crop: Rect, plan: &SamplePlan) -> Result<Rgb, PixelError> {
    let size = plan.size();
    let mut pixels = vec![0u8; size.area() as usize * 3];
    resample_stages(RgbRef::of(image), origin, crop, plan, &mut pixels)?;
    after_resample(plan, &mut pixels);
    Ok(Rgb { width: size.width, height: size.height, pixels })
}


/// The resample step: `crop` of `image` (at `origin`) to `out` with `filter`, not mirrored,
/// written into `dst` (`out`'s packed RGB rows, exactly).
pub(crate) fn resample_into(image: RgbRef<'_>, origin: (u32, u32), crop: Rect, out: Size2, filter: Filter, dst: &mut [u8]) -> Result<(), PixelError> {
    let left = (crop.x - f64::from(origin.0)).clamp(0.0, f64::from(image.width));
    let top = (crop.y - f64::from(origin.1)).clamp(0.0, f64::from(image.height));
    let width = crop.width.min(f64::from(image.width) - left);
    let height = crop.height.min(f64::from(image.height) - top);
    let whole = left == 0.0
        && top == 0.0
        && width == f64::from(image.width)
        && height == f64::from(image.height);
    if whole && out == Size2::new(image.width, image.height) && dst.len() == image.pixels.len() {
        dst.copy_from_slice(image.pixels);
        return Ok(());
    }
    let src = ImageRef::new(image.width, image.height, image.pixels, PixelType::U8x3)?;
    let mut dst = Image::from_slice_u8(out.width, out.height, dst, PixelType::U8x3)?;
    let options = ResizeOptions::new()
        .resize_alg(ResizeAlg::Convolution(filter.filter_type()))
        .crop(left, top, width, height);
    RESIZER.with(|r| r.borrow_mut().resize(&src, &mut dst, &options))?;
    Ok(())
}

pub(crate) fn mirror_rows(pixels: &mut [u8], width: usize) {
    for row in pixels.chunks_exact_mut(width * 3) {
        row.as_chunks_mut::<3>().0.reverse();
    }
}

/// Mean absolute difference per value between two images of one size.
#[cfg(test)]
pub(crate) fn mean_abs_diff(a: &Rgb, b: &Rgb) -> f64 {
    assert_eq!((a.width, a.height), (b.width, b.height));
    let sum: u64 = a.pixels.iter().zip(&b.pixels).map(|(x, y)| u64::from(x.abs_diff(*y))).sum();
    sum as f64 / a.pixels.len().max(1) as f64
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use crate::augment::{plan_sample, AugmentOp};
    use crate::draw::draw_rng;
    use crate::synthetic::photo_jpeg;

    #[test]
    fn decoded_view_is_the_full_image() {
        let jpeg = photo_jpeg(500, 375, turbojpeg::Subsamp::Sub2x2);
        let rgb = decode_full(&jpeg, 64_000_000).expect("decode");
        assert_eq!((rgb.width, rgb.height, rgb.pixels.len()), (500, 375, 500 * 375 * 3));
    }

    #[test]
    fn too_many_pixels_is_refused_before_decoding() {
        let jpeg = photo_jpeg(200, 100, turbojpeg::Subsamp::Sub2x2);
        let err = decode_full(&jpeg, 19_999).unwrap_err();
        assert!(matches!(err, PixelError::TooManyPixels { max_pixels: 19_999, .. }), "{err}");
        assert_eq!(err.to_string(), "200x100 is 20000 pixels, over the limit of 19999 (max_pixels)");
    }

    #[test]
    fn fast_path_stays_within_tolerance_of_the_straightforward_path() {
        let ops = AugmentOp::imagenet_train();
        let mut worst: f64 = 0.0;
        let mut scaled = 0;
        for (i, (w, h, ss)) in [
            (500, 375, turbojpeg::Subsamp::Sub2x2),
            (1024, 768, turbojpeg::Subsamp::Sub2x1),
            (2000, 1500, turbojpeg::Subsamp::None),
            (333, 257, turbojpeg::Subsamp::Sub2x2),
        ]
        .into_iter()
        .enumerate()
        {
            let jpeg = photo_jpeg(w, h, ss);
            for sample in 0..25 {
                let plan = plan_sample(&ops, Size2::new(w as u32, h as u32), &mut draw_rng(5, 0, i as u64, sample));
                if dct_scale_for(plan.crop, plan.out) != Scale::One {
                    scaled += 1;
                }
                let fast = augment(&jpeg, &plan, 64_000_000).expect("fast");
                let slow = augment_reference(&jpeg, &plan, 64_000_000).expect("slow");
                worst = worst.max(mean_abs_diff(&fast, &slow));
            }
        }
        assert!(scaled > 10, "the DCT scaling path was exercised only {scaled} times");
        assert!(worst <= FAST_PATH_TOLERANCE, "worst mean abs diff {worst}");
    }

    #[test]
    fn served_bytes_are_the_allocating_paths_bytes() {
        use crate::output_config::{Dtype, Format};
        let ops = AugmentOp::imagenet_train();
        let files = crate::served::OutputFiles::new();
        let outputs = [
            OutputConfig::default(),
            OutputConfig { format: Format::Npy, ..OutputConfig::default() },
            OutputConfig { format: Format::Npy, dtype: Dtype::Float32, ..OutputConfig::default() },
        ];
        for (i, (w, h, ss)) in [(500, 375, turbojpeg::Subsamp::Sub2x2), (1024, 768, turbojpeg::Subsamp::Sub2x1), (333, 257, turbojpeg::Subsamp::None)]
            .into_iter()
            .enumerate()
        {
            let jpeg = photo_jpeg(w, h, ss);
            let full = decode_full(&jpeg, 64_000_000).expect("full");
            for sample in 0..12 {
                let plan = plan_sample(&ops, Size2::new(w as u32, h as u32), &mut draw_rng(9, 0, i as u64, sample));
                // The composition before the served path: region decode into its own buffer,
                // resample into another, then the header and a copy.
                let cut = jpeg_cut(Size2::new(w as u32, h as u32), &plan);
                let decoded = jpeg::decode(&jpeg, cut.scale, Some(cut.region)).expect("decode");
                let separate = finish(&decoded.image, decoded.origin, cut.crop, &plan).expect("finish");
                let output = &outputs[sample as usize % outputs.len()];
                let dest = if sample % 2 == 0 { Dest::Memory } else { Dest::File(&files) };
                let served = augment_served(&jpeg, &plan, 64_000_000, output, dest).expect("served");
                assert_eq!(served.to_vec().expect("bytes"), output::encode(output, &separate).expect("encodes"), "jpeg {i} draw {sample}");
                let from_pixels = augment_pixels_served(&full, &plan, output, dest).expect("pixels served");
                let pixels = augment_pixels(&full, &plan).expect("pixels");
                assert_eq!(from_pixels.to_vec().expect("bytes"), output::encode(output, &pixels).expect("encodes"), "pixels {i} draw {sample}");
            }
        }
    }

    #[test]
    fn flip_mirrors_the_output() {
        let jpeg = photo_jpeg(300, 200, turbojpeg::Subsamp::None);
        let mut plan = SamplePlan::identity(Size2::new(300, 200));
        let plain = augment(&jpeg, &plan, 64_000_000).expect("plain");
        plan.flip = true;
        let flipped = augment(&jpeg, &plan, 64_000_000).expect("flipped");
        let px = |img: &Rgb, x: usize, y: usize| img.pixels[(y * 300 + x) * 3..][..3].to_vec();
        assert_eq!(px(&plain, 0, 10), px(&flipped, 299, 10));
        assert_eq!(px(&plain, 120, 50), px(&flipped, 179, 50));
    }

    #[test]
    fn png_goes_through_image() {
        let mut png = Vec::new();
        let img = image::RgbaImage::from_fn(40, 30, |x, y| image::Rgba([x as u8 * 5, y as u8 * 7, 9, 128]));
        img.write_to(&mut Cursor::new(&mut png), image::ImageFormat::Png).expect("png");
        let rgb = decode_full(&png, 1_000_000).expect("decode");
        assert_eq!((rgb.width, rgb.height), (40, 30));
        assert_eq!(&rgb.pixels[..3], &[0, 0, 9]);
        assert_eq!(probe_size(Cursor::new(&png)).expect("probe"), Size2::new(40, 30));
        let plan = plan_sample(&AugmentOp::imagenet_train(), Size2::new(40, 30), &mut draw_rng(0, 0, 0, 0));
        assert_eq!(augment(&png, &plan, 1_000_000).expect("augment").pixels.len(), 224 * 224 * 3);
        assert!(matches!(decode_full(b"plain text", 1_000_000), Err(PixelError::UnknownFormat)));
        assert!(matches!(probe_size(Cursor::new(b"")), Err(PixelError::Empty)));
    }
}
