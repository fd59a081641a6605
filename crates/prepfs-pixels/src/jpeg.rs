//! JPEG through libjpeg-turbo 3 (TurboJPEG API, via `turbojpeg-sys`): header probing without
//! decoding, and the fast decode that does only the work a crop needs.
//!
//! [`probe`] walks the marker segments for the frame size (the `decoded` view's exact file size
//! comes from it). [`decode`] decodes the whole image or just a region of it, optionally scaled
//! down by 1/2, 1/4 or 1/8 in the DCT. Output is always RGB, matching PIL's
//! `Image.open(p).convert("RGB")`: grayscale is replicated, CMYK/YCCK is converted with PIL's
//! formula (Adobe-inverted data un-inverted first), EXIF orientation is ignored as PIL ignores it.
//! Both say why they refuse a JPEG with a [`JpegError`] (`EIO` to a reader).

use std::cell::RefCell;
use std::ffi::CStr;
use std::io::{self, Read};
use std::sync::Arc;

use turbojpeg_sys as tj;
use crate::rgb::Rgb;

/// Why a JPEG could not be probed or decoded. Every one is `EIO` to a reader: the sample is
/// damaged or unsupported, not missing.
#[derive(Debug, Clone, thiserror::Error)]
pub enum JpegError {
    /// The marker segments up to the frame header are missing, cut short or damaged; the
    /// message says which.
    #[error("{0}")]
    Header(&'static str),
    /// Reading the header failed (the reader's error, not the data's).
    #[error("{0}")]
    Read(Arc<io::Error>),
    /// TurboJPEG could not be set up on this thread.
    #[error("cannot initialise TurboJPEG")]
    Init,
    /// The header TurboJPEG read claims no pixels.
    #[error("bad dimensions in header")]
    Dimensions,
    /// A sample precision other than 8 bits (12-bit, 16-bit lossless).
    #[error("{0}-bit JPEG is not supported")]
    Precision(i32),
    /// TurboJPEG refused the data (corrupt, truncated, unsupported), in its own words.
    #[error("{0}")]
    Turbo(String),
    /// No end-of-image marker follows the first scan: the file was cut short.
    #[error("premature end of JPEG file (no end-of-image marker after the scan)")]
    CutShort,
}

impl prepfs_base::errno::ToErrno for JpegError {
    fn to_errno(&self) -> libc::c_int {
        libc::EIO
    }
}

/// What the marker segments before the first scan say about a JPEG.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JpegInfo {
    pub width: u32,
    pub height: u32,
    pub components: u8,
    pub progressive: bool,
    /// An Adobe APP14 segment: CMYK data in it is stored inverted.
    pub(crate) adobe: bool,
}

/// Walks a JPEG's marker segments from SOI, the one place their framing is read (fill bytes
/// before a marker, the standalone markers that carry no length, segment lengths): `visit` gets
/// each marker in turn with the length of its body (0 for a standalone marker) and the reader at
/// that body, which it reads or skips whole (see [`skip`]); it returns `Some` to stop there.
fn walk_segments<R: Read, T>(
    reader: &mut R,
    mut visit: impl FnMut(u8, usize, &mut R) -> Result<Option<T>, JpegError>,
) -> Result<T, JpegError> {
    let bad = JpegError::Header;
    let mut two = [0u8; 2];
    reader.read_exact(&mut two).map_err(|_| bad("empty or too short for a JPEG"))?;
    if two != [0xFF, 0xD8] {
        return Err(bad("not a JPEG (no SOI marker)"));
    }
    loop {
        // Markers may be preceded by fill bytes 0xFF.
        let mut byte = [0u8; 1];
        reader.read_exact(&mut byte).map_err(|_| bad("truncated before the frame header"))?;
        if byte[0] != 0xFF {
            return Err(bad("corrupt marker structure"));
        }
        let mut marker = 0xFF;
        while marker == 0xFF {
            reader.read_exact(&mut byte).map_err(|_| bad("truncated before the frame header"))?;
            marker = byte[0];
        }
        let body_len = if (0xD0..=0xD9).contains(&marker) || marker == 0x01 {
            0 // standalone markers carry no length
        } else {
            reader.read_exact(&mut two).map_err(|_| bad("truncated segment"))?;
            let len = usize::from(u16::from_be_bytes(two));
            if len < 2 {
                return Err(bad("corrupt segment length"));
            }
            len - 2
        };
        if let Some(done) = visit(marker, body_len, reader)? {
            return Ok(done);
        }
    }
}

/// Reads marker segments up to the frame header; reads only the segment headers, skipping
/// payloads, so it costs a few small reads even with large EXIF or ICC segments.
pub fn probe(mut reader: impl Read) -> Result<JpegInfo, JpegError> {
    let bad = JpegError::Header;
    let mut adobe = false;
    walk_segments(&mut reader, |marker, body_len, reader| match marker {
        0xD9 => Err(bad("no frame header before EOI")),
        0xDA => Err(bad("scan before frame header")),
        0xC0..=0xCF if !matches!(marker, 0xC4 | 0xC8 | 0xCC) => {
            let mut sof = [0u8; 6];
            if body_len < 6 {
                return Err(bad("corrupt frame header"));
            }
            reader.read_exact(&mut sof).map_err(|_| bad("truncated frame header"))?;
            let height = u32::from(u16::from_be_bytes([sof[1], sof[2]]));
            let width = u32::from(u16::from_be_bytes([sof[3], sof[4]]));
            if width == 0 || height == 0 {
                return Err(bad("frame header has a zero dimension"));
            }
            Ok(Some(JpegInfo {
                width,
                height,
                components: sof[5],
                progressive: matches!(marker, 0xC2 | 0xC6 | 0xCA | 0xCE),
                adobe,
            }))
        }
        0xEE if body_len >= 5 => {
            let mut tag = [0u8; 5];
            reader.read_exact(&mut tag).map_err(|_| bad("truncated segment"))?;
            adobe |= &tag == b"Adobe";
            skip(reader, body_len - 5).map(|()| None)
        }
        _ => skip(reader, body_len).map(|()| None),
    })
}

fn skip(reader: &mut impl Read, n: usize) -> Result<(), JpegError> {
    let copied = io::copy(&mut reader.take(n as u64), &mut io::sink()).map_err(|e| JpegError::Read(Arc::new(e)))?;
    if copied as usize != n {
        return Err(JpegError::Header("truncated segment"));
    }
    Ok(())
}

/// DCT-domain downscaling TurboJPEG does in its fast SIMD paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    One,
    Half,
    Quarter,
    Eighth,
}

impl Scale {
    pub const ALL: [Scale; 4] = [Scale::One, Scale::Half, Scale::Quarter, Scale::Eighth];

    /// The denominator: 1, 2, 4 or 8.
    pub(crate) fn denom(self) -> u32 {
        match self {
            Scale::One => 1,
            Scale::Half => 2,
            Scale::Quarter => 4,
            Scale::Eighth => 8,
        }
    }
    /// A dimension after scaling, rounded up as TurboJPEG does.
    pub fn apply(self, dim: u32) -> u32 {
        dim.div_ceil(self.denom())
    }
}

/// The part of a JPEG [`decode`] produced: the region's place in the scaled image.
#[derive(Debug)]
pub struct Decoded {
    pub image: Rgb,
    /// Left and top of `image` within the whole scaled image.
    pub origin: (u32, u32),
}

/// A rectangle of the scaled image, in whole pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    pub x: u32,
    pub y: u32,
    pub width: u32,
    pub height: u32,
}

/// One TurboJPEG decompressor per thread: handles are not thread-safe, and cheap to reuse.
struct Handle(tj::tjhandle);

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: the handle came from tj3Init and is destroyed once.
        unsafe { tj::tj3Destroy(self.0) }
    }
}

thread_local! {
    static HANDLE: RefCell<Option<Handle>> = const { RefCell::new(None) };
}

// bindgen gives these enums platform-dependent integer types; the casts are for portability.
#[allow(clippy::unnecessary_cast)]
const TJPF_RGB: i32 = tj::TJPF_TJPF_RGB as i32;
#[allow(clippy::unnecessary_cast)]
const TJPF_CMYK: i32 = tj::TJPF_TJPF_CMYK as i32;

/// The message of the last TurboJPEG error on `handle`.
fn last_message(handle: tj::tjhandle) -> String {
    // SAFETY: tj3GetErrorStr returns a NUL-terminated string owned by the handle.
    unsafe { CStr::from_ptr(tj::tj3GetErrorStr(handle)).to_string_lossy().into_owned() }
}

/// The last TurboJPEG error on `handle`, as a refusal.
fn last_error(handle: tj::tjhandle) -> JpegError {
    JpegError::Turbo(last_message(handle))
}

/// Libjpeg warnings that leave the image intact (real datasets carry these; PIL accepts them).
fn harmless_warning(message: &str) -> bool {
    message.contains("extraneous bytes before marker")
}

/// Decodes `data` scaled by `scale`; with `region`, only that rectangle of the scaled image
/// (widened on the left to the scaled MCU boundary TurboJPEG needs). Any libjpeg warning other
/// than extraneous bytes (truncation, corrupt entropy data) is an error: a damaged sample is
/// refused, never served half grey.
pub fn decode(data: &[u8], scale: Scale, region: Option<Region>) -> Result<Decoded, JpegError> {
    let mut pixels = Vec::new();
    let part = decode_into(data, scale, region, &mut pixels)?;
    pixels.truncate(part.len());
    Ok(Decoded { image: Rgb { width: part.width, height: part.height, pixels }, origin: part.origin })
}

/// Where [`decode_into`] put the pixels: packed RGB rows, `width * height * 3` bytes at the
/// start of the buffer, the region's place in the scaled image at `origin`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DecodedPart {
    pub width: u32,
    pub height: u32,
    pub origin: (u32, u32),
}

impl DecodedPart {
    /// Bytes of RGB pixels at the start of the buffer.
    pub fn len(&self) -> usize {
        self.width as usize * self.height as usize * 3
    }

}

/// [`decode`] into `buf`, a buffer the caller reuses: it is grown when too small (never shrunk,
/// never cleared), so a thread decoding one image after another allocates and zeroes nothing
/// once it has met its largest region. The pixels are the first [`DecodedPart::len`] bytes.
pub(crate) fn decode_into(data: &[u8], scale: Scale, region: Option<Region>, buf: &mut Vec<u8>) -> Result<DecodedPart, JpegError> {
    HANDLE.with(|cell| {
        let mut slot = cell.borrow_mut();
        let handle = match slot.as_ref() {
            Some(h) => h.0,
            None => {
                // SAFETY: plain constructor; null means failure.
                let h = unsafe { tj::tj3Init(tj::TJINIT_TJINIT_DECOMPRESS as i32) };
                if h.is_null() {
                    return Err(JpegError::Init);
                }
                slot.insert(Handle(h)).0
            }
        };
        decode_with(handle, data, scale, region, buf)
    })
}

/// Whether `data` has an end-of-image marker after its first scan begins (entropy-coded data
/// never holds one: a 0xFF there is stuffed). A file cut short, the usual damage, has none.
/// A region decode stops reading where the region's rows end, so without this check a file cut
/// below the crop would be served for some draws and refused for others.
fn ends_after_its_scan(data: &[u8]) -> bool {
    const EOI: [u8; 2] = [0xFF, 0xD9];
    if data.ends_with(&EOI) {
        return first_scan(data).is_some();
    }
    // Bytes after the end marker (a camera's trailer): look back for it.
    first_scan(data).is_some_and(|scan| data.get(scan..).is_some_and(|rest| rest.windows(2).any(|w| w == EOI)))
}

/// Where the first scan's entropy-coded data begins (after its SOS segment); `None` if the
/// walk ([`walk_segments`]) leaves the data or meets EOI first.
fn first_scan(data: &[u8]) -> Option<usize> {
    let mut rest = data;
    walk_segments(&mut rest, |marker, body_len, reader| match marker {
        0xD9 => Err(JpegError::Header("no scan before EOI")),
        _ => skip(reader, body_len).map(|()| (marker == 0xDA).then_some(())),
    })
    .ok()?;
    Some(data.len() - rest.len())
}

fn decode_with(
    handle: tj::tjhandle,
    data: &[u8],
    scale: Scale,
    region: Option<Region>,
    buf: &mut Vec<u8>,
) -> Result<DecodedPart, JpegError> {
    if !ends_after_its_scan(data) {
        return Err(JpegError::CutShort);
    }
    // SAFETY: `data` outlives the calls; the handle is this thread's own.
    unsafe {
        if tj::tj3DecompressHeader(handle, data.as_ptr(), data.len() as tj::size_t) != 0 {
            return Err(last_error(handle));
        }
        let width = tj::tj3Get(handle, tj::TJPARAM_TJPARAM_JPEGWIDTH as i32);
        let height = tj::tj3Get(handle, tj::TJPARAM_TJPARAM_JPEGHEIGHT as i32);
        let subsamp = tj::tj3Get(handle, tj::TJPARAM_TJPARAM_SUBSAMP as i32);
        let colorspace = tj::tj3Get(handle, tj::TJPARAM_TJPARAM_COLORSPACE as i32);
        let precision = tj::tj3Get(handle, tj::TJPARAM_TJPARAM_PRECISION as i32);
        let lossless = tj::tj3Get(handle, tj::TJPARAM_TJPARAM_LOSSLESS as i32);
        if width <= 0 || height <= 0 {
            return Err(JpegError::Dimensions);
        }
        if precision != 8 {
            return Err(JpegError::Precision(precision));
        }
        let (width, height) = (width as u32, height as u32);
        // Lossless JPEGs cannot be scaled or cropped; unknown subsampling cannot be cropped.
        let scale = if lossless != 0 { Scale::One } else { scale };
        let factor = tj::tjscalingfactor { num: 1, denom: scale.denom() as i32 };
        if tj::tj3SetScalingFactor(handle, factor) != 0 {
            return Err(last_error(handle));
        }
        let (sw, sh) = (scale.apply(width), scale.apply(height));
        let region = region.filter(|_| lossless == 0 && subsamp >= 0);
        let (x, y, w, h) = match region {
            Some(r) => {
                let mcu_w = mcu_width(subsamp);
                let scaled_mcu = mcu_w.div_ceil(scale.denom()).max(1);
                let x = r.x.min(sw.saturating_sub(1)) / scaled_mcu * scaled_mcu;
                let right = (r.x + r.width).min(sw);
                let y = r.y.min(sh.saturating_sub(1));
                let bottom = (r.y + r.height).min(sh);
                (x, y, right.saturating_sub(x).max(1), bottom.saturating_sub(y).max(1))
            }
            None => (0, 0, sw, sh),
        };
        let crop = if (x, y, w, h) == (0, 0, sw, sh) {
            tj::tjregion { x: 0, y: 0, w: 0, h: 0 }
        } else {
            tj::tjregion { x: x as i32, y: y as i32, w: w as i32, h: h as i32 }
        };
        if tj::tj3SetCroppingRegion(handle, crop) != 0 {
            return Err(last_error(handle));
        }
        let cmyk = colorspace == tj::TJCS_TJCS_CMYK as i32 || colorspace == tj::TJCS_TJCS_YCCK as i32;
        let (format, bpp) = if cmyk { (TJPF_CMYK, 4usize) } else { (TJPF_RGB, 3usize) };
        let len = w as usize * h as usize * bpp;
        if buf.capacity() < len {
            // Its old pixels are of no use: a fresh zeroed allocation (fresh pages need no
            // clearing) rather than a copy of them and a memset, faulted in by one call since
            // the decoder writes it whole.
            *buf = vec![0u8; len];
            prepfs_base::alloc::populate(buf);
        } else if buf.len() < len {
            buf.resize(len, 0);
        }
        let pitch = (w as usize * bpp) as i32;
        let rc = tj::tj3Decompress8(handle, data.as_ptr(), data.len() as tj::size_t, buf.as_mut_ptr(), pitch, format);
        if rc != 0 {
            let message = last_message(handle);
            let fatal = tj::tj3GetErrorCode(handle) == tj::TJERR_TJERR_FATAL as i32;
            if fatal || !harmless_warning(&message) {
                return Err(JpegError::Turbo(message));
            }
        }
        if cmyk {
            let adobe = probe(data).map(|i| i.adobe).unwrap_or(false);
            cmyk_to_rgb_in_place(&mut buf[..len], adobe);
        }
        Ok(DecodedPart { width: w, height: h, origin: (x, y) })
    }
}

/// The width in pixels of one MCU for a TurboJPEG subsampling code.
fn mcu_width(subsamp: i32) -> u32 {
    match subsamp {
        1 | 2 => 16, // 4:2:2, 4:2:0
        5 => 32,     // 4:1:1
        _ => 8,      // 4:4:4, grey, 4:4:0, 4:4:1
    }
}

/// PIL's CMYK to RGB (Pillow's `cmyk2rgb`: `r = nk - c * nk / 255` with `nk = 255 - k`, in its
/// integer rounding), after undoing Adobe's inversion as PIL's "CMYK;I" raw mode does. In place:
/// the RGB pixels are packed at the start of `buf` (pixel `i`'s RGB is written after its CMYK
/// is read, and never past it).
fn cmyk_to_rgb_in_place(buf: &mut [u8], adobe_inverted: bool) {
    // Pillow's MULDIV255(a, b): (t = a * b + 128, ((t >> 8) + t) >> 8).
    let muldiv255 = |a: u32, b: u32| {
        let t = a * b + 128;
        ((t >> 8) + t) >> 8
    };
    let flip = if adobe_inverted { 255 } else { 0 };
    for i in 0..buf.len() / 4 {
        let px = [buf[4 * i] ^ flip, buf[4 * i + 1] ^ flip, buf[4 * i + 2] ^ flip, buf[4 * i + 3] ^ flip];
        let nk = 255 - u32::from(px[3]);
        for c in 0..3 {
            buf[3 * i + c] = nk.saturating_sub(muldiv255(u32::from(px[c]), nk)) as u8;
        }
    }
}

/// [`cmyk_to_rgb_in_place`] into a new buffer (the tests' reference).
#[cfg(test)]
fn cmyk_to_rgb(cmyk: &[u8], adobe_inverted: bool) -> Vec<u8> {
    let mut buf = cmyk.to_vec();
    cmyk_to_rgb_in_place(&mut buf, adobe_inverted);
    buf.truncate(cmyk.len() / 4 * 3);
    buf
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(width: usize, height: usize, subsamp: turbojpeg::Subsamp, progressive: bool) -> Vec<u8> {
        let mut pixels = vec![0u8; width * height * 3];
        for y in 0..height {
            for x in 0..width {
                let i = (y * width + x) * 3;
                pixels[i] = (x * 255 / width) as u8;
                pixels[i + 1] = (y * 255 / height) as u8;
                pixels[i + 2] = ((x + y) % 256) as u8;
            }
        }
        crate::synthetic::compress_rgb(&pixels, width, height, subsamp, progressive)
    }

    #[test]
    fn probe_reads_the_frame_header_only() {
        let jpeg = encode(333, 257, turbojpeg::Subsamp::Sub2x2, true);
        let info = probe(jpeg.as_slice()).expect("probe");
        assert_eq!((info.width, info.height, info.components), (333, 257, 3));
        assert!(info.progressive);
        // Header alone suffices: cut the file right after the frame header.
        let info2 = probe(&jpeg[..jpeg.len() / 2]).expect("probe half");
        assert_eq!(info, info2);
        assert!(probe(&b""[..]).is_err());
        assert!(probe(&b"hello world"[..]).is_err());
        assert!(probe(&jpeg[..4]).is_err());
    }

    #[test]
    fn region_decode_matches_the_same_pixels_of_a_full_decode() {
        for subsamp in [turbojpeg::Subsamp::None, turbojpeg::Subsamp::Sub2x1, turbojpeg::Subsamp::Sub2x2] {
            let jpeg = encode(300, 200, subsamp, false);
            let full = decode(&jpeg, Scale::One, None).expect("full");
            assert_eq!((full.image.width, full.image.height), (300, 200));
            let part = decode(&jpeg, Scale::One, Some(Region { x: 37, y: 21, width: 100, height: 90 }))
                .expect("part");
            let (ox, oy) = part.origin;
            assert!(ox <= 37 && oy == 21 && ox + part.image.width >= 137);
            // Rows inside the region agree exactly with the full decode, away from the edges
            // where upsampling context differs.
            let mut max_diff = 0i32;
            for y in 5..85u32 {
                for x in 5..95u32 {
                    let (gx, gy) = (37 + x, 21 + y);
                    let lx = gx - ox;
                    let a = &full.image.pixels[((gy * 300 + gx) * 3) as usize..][..3];
                    let b = &part.image.pixels[(((gy - oy) * part.image.width + lx) * 3) as usize..][..3];
                    for c in 0..3 {
                        max_diff = max_diff.max((i32::from(a[c]) - i32::from(b[c])).abs());
                    }
                }
            }
            assert!(max_diff <= 2, "{subsamp:?}: {max_diff}");
        }
    }

    #[test]
    fn scaled_decode_has_turbojpegs_rounded_up_size() {
        let jpeg = encode(333, 257, turbojpeg::Subsamp::Sub2x2, false);
        for scale in Scale::ALL {
            let d = decode(&jpeg, scale, None).expect("decode");
            assert_eq!((d.image.width, d.image.height), (scale.apply(333), scale.apply(257)));
        }
    }

    #[test]
    fn truncated_and_garbage_data_are_errors() {
        let jpeg = encode(256, 256, turbojpeg::Subsamp::Sub2x2, false);
        assert!(decode(&jpeg[..jpeg.len() * 2 / 5], Scale::One, None).is_err());
        assert!(decode(b"not a jpeg at all", Scale::One, None).is_err());
        assert!(decode(&[], Scale::One, None).is_err());
    }

    #[test]
    fn cmyk_conversion_is_pils() {
        // Pillow: CMYK (0, 0, 0, 0) is white, (255, 0, 0, 0) is cyan, k=128 halves.
        assert_eq!(cmyk_to_rgb(&[0, 0, 0, 0], false), vec![255, 255, 255]);
        assert_eq!(cmyk_to_rgb(&[255, 0, 0, 0], false), vec![0, 255, 255]);
        assert_eq!(cmyk_to_rgb(&[0, 0, 0, 128], false), vec![127, 127, 127]);
        assert_eq!(cmyk_to_rgb(&[255, 255, 255, 255], true), vec![255, 255, 255]);
    }

    #[test]
    fn cmyk_conversion_in_place_matches_pixel_by_pixel() {
        let cmyk: Vec<u8> = (0..4 * 97u32).map(|i| (i * 37 + i / 3) as u8).collect();
        for adobe in [false, true] {
            let one_by_one: Vec<u8> = cmyk.chunks_exact(4).flat_map(|px| cmyk_to_rgb(px, adobe)).collect();
            assert_eq!(cmyk_to_rgb(&cmyk, adobe), one_by_one);
        }
    }

    #[test]
    fn a_file_cut_short_below_the_crop_is_refused_like_a_full_decode_of_it() {
        let jpeg = crate::synthetic::photo_jpeg(600, 400, turbojpeg::Subsamp::Sub2x2);
        let top = Some(Region { x: 0, y: 0, width: 300, height: 40 });
        decode(&jpeg, Scale::One, top).expect("whole file");
        let cut = &jpeg[..jpeg.len() * 6 / 10];
        assert!(decode(cut, Scale::One, None).is_err(), "a full decode meets the cut");
        let err = decode(cut, Scale::One, top).expect_err("rows above the cut only");
        assert!(err.to_string().contains("premature end"), "{err}");
        // Bytes after the end marker (a camera's trailer) are no damage.
        let mut trailer = jpeg.clone();
        trailer.extend_from_slice(b"trailer \xff\xd8 data");
        decode(&trailer, Scale::One, top).expect("a trailer after EOI");
        // An end marker only in a segment before the scan (an EXIF thumbnail's) does not count.
        let mut thumb = vec![0xFF, 0xD8, 0xFF, 0xE1, 0x00, 0x06, 0xFF, 0xD8, 0xFF, 0xD9];
        thumb.extend_from_slice(&cut[2..]);
        assert!(!ends_after_its_scan(&thumb));
        assert!(ends_after_its_scan(&jpeg) && !ends_after_its_scan(cut) && !ends_after_its_scan(&jpeg[..2]));
    }

    #[test]
    fn decode_into_reuses_its_buffer_and_matches_decode() {
        let small = encode(64, 48, turbojpeg::Subsamp::Sub2x2, false);
        let big = encode(300, 200, turbojpeg::Subsamp::Sub2x1, true);
        let mut buf = Vec::new();
        for (jpeg, region) in [(&big, None), (&small, None), (&big, Some(Region { x: 40, y: 10, width: 120, height: 90 }))] {
            let want = decode(jpeg, Scale::One, region).expect("decode");
            let part = decode_into(jpeg, Scale::One, region, &mut buf).expect("decode_into");
            assert_eq!((part.width, part.height, part.origin), (want.image.width, want.image.height, want.origin));
            assert_eq!(&buf[..part.len()], want.image.pixels.as_slice());
        }
        assert_eq!(buf.len(), 300 * 200 * 3, "grown to the largest decode, never shrunk");
    }
}
