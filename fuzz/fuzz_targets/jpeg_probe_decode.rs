//! Arbitrary bytes as a sample file: the header probes (`jpeg::probe`, `pipeline::probe_size`)
//! and, for headers that claim a small image, the decoders (`pipeline::decode_full`, and
//! `jpeg::decode` whole and by region at a DCT scale). Errors are fine; a panic, an abort or a
//! sanitizer report is a finding.
//!
//! Checked besides "no panic": a decode never returns more pixels than its header's probe
//! allowed (the `max_pixels` guard rests on the probe agreeing with the decoder), and a
//! returned image's buffer is exactly width * height * 3 bytes.
#![no_main]

use std::io::Cursor;

use libfuzzer_sys::fuzz_target;
use prepfs_pixels::jpeg::{self, Region, Scale};
use prepfs_pixels::pipeline;

/// The largest image the harness decodes (headers claiming more are only probed).
const MAX_PIXELS: u64 = 4_000_000;

fn fnv(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn check_rgb(what: &str, rgb: &prepfs_pixels::rgb::Rgb, max_w: u32, max_h: u32) {
    assert_eq!(
        rgb.pixels.len() as u64,
        u64::from(rgb.width) * u64::from(rgb.height) * 3,
        "{what}: {}x{} image with {} bytes",
        rgb.width,
        rgb.height,
        rgb.pixels.len()
    );
    assert!(
        rgb.width <= max_w && rgb.height <= max_h,
        "{what}: decoded {}x{}, the probe said at most {max_w}x{max_h}",
        rgb.width,
        rgb.height
    );
}

fuzz_target!(|data: &[u8]| {
    let probed = jpeg::probe(data);
    let size = pipeline::probe_size(Cursor::new(data));
    if let (Ok(info), Ok(size)) = (&probed, &size) {
        assert_eq!((info.width, info.height), (size.width, size.height), "the two probes disagree");
    }

    // The decoded view: decode_full checks its own pixel limit against the probe.
    if let Ok(size) = &size {
        if let Ok(rgb) = pipeline::decode_full(data, MAX_PIXELS) {
            assert!(size.area() <= MAX_PIXELS, "decode_full passed its limit: {}x{}", size.width, size.height);
            check_rgb("decode_full", &rgb, size.width, size.height);
        }
    }

    // The fast JPEG decoder directly, for headers that claim a small image: one DCT scale,
    // whole and a region, both drawn from the bytes.
    let Ok(info) = probed else { return };
    if u64::from(info.width) * u64::from(info.height) > MAX_PIXELS {
        return;
    }
    let h = fnv(data);
    let scale = Scale::ALL[(h & 3) as usize];
    let (sw, sh) = (scale.apply(info.width), scale.apply(info.height));
    if let Ok(d) = jpeg::decode(data, scale, None) {
        check_rgb("decode", &d.image, info.width, info.height);
    }
    let pick = |bits: u64, dim: u32| (bits % (u64::from(dim) + 1)) as u32;
    let region = Region {
        x: pick(h >> 8, sw),
        y: pick(h >> 24, sh),
        width: pick(h >> 40, sw).max(1),
        height: pick(h >> 52, sh).max(1),
    };
    if let Ok(d) = jpeg::decode(data, scale, Some(region)) {
        check_rgb("region decode", &d.image, info.width, info.height);
        let (ox, oy) = d.origin;
        // Lossless JPEGs are neither scaled nor cropped: the whole image comes back.
        let whole = d.origin == (0, 0) && (d.image.width, d.image.height) == (info.width, info.height);
        assert!(
            whole || (ox + d.image.width <= sw && oy + d.image.height <= sh),
            "region {region:?} at scale {scale:?} of {}x{}: got {}x{} at {:?}",
            info.width,
            info.height,
            d.image.width,
            d.image.height,
            d.origin
        );
    }
});
