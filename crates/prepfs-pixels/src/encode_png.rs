//! PNG output: 8-bit RGB, filter none, the zlib stream in stored (uncompressed) deflate blocks.
//!
//! Stored blocks make the file's size a function of the image's size alone ([`len`]), so
//! `stat` answers before anything is encoded, as for PPM; and encoding is a copy plus the CRC
//! and Adler checksums (no compression, by design: the format exists for decoders that refuse
//! PPM, such as `torchvision.io.decode_image`, not to save space). [`write`] fills exactly
//! [`len`] bytes.

use crate::rgb::Size2;

const SIGNATURE: &[u8; 8] = b"\x89PNG\r\n\x1a\n";
/// A stored deflate block holds at most this many bytes.
const STORED_MAX: usize = 65_535;
/// An IDAT chunk holds at most this many bytes (PNG allows 2^31 - 1); a larger stream is split.
const IDAT_MAX: usize = 1 << 30;
/// Length, type and CRC around a chunk's data.
const CHUNK_OVERHEAD: usize = 12;

/// Filtered scanlines: one filter byte (0, none) then the row's packed RGB.
fn raw_len(size: Size2) -> usize {
    size.height as usize * (1 + size.width as usize * 3)
}

/// The zlib stream: a 2-byte header, stored blocks (5 bytes each before its data; at least one,
/// the final), and the Adler-32 of the raw data.
fn zlib_len(size: Size2) -> usize {
    let raw = raw_len(size);
    2 + raw + 5 * raw.div_ceil(STORED_MAX).max(1) + 4
}

/// The exact size of the PNG of an image of `size` pixels.
pub fn len(size: Size2) -> u64 {
    len_split(size, IDAT_MAX)
}

/// [`len`] with IDAT chunks of at most `idat_max` bytes.
fn len_split(size: Size2, idat_max: usize) -> u64 {
    let z = zlib_len(size);
    let idat_chunks = z.div_ceil(idat_max);
    (SIGNATURE.len() + CHUNK_OVERHEAD + 13 + z + CHUNK_OVERHEAD * idat_chunks + CHUNK_OVERHEAD) as u64
}

/// Writes the PNG of packed RGB `pixels` (`size`) into `out`, exactly [`len`] bytes.
pub fn write(pixels: &[u8], size: Size2, out: &mut [u8]) {
    write_split(pixels, size, out, IDAT_MAX);
}

/// [`write`] with IDAT chunks of at most `idat_max` bytes.
fn write_split(pixels: &[u8], size: Size2, out: &mut [u8], idat_max: usize) {
    debug_assert_eq!(out.len() as u64, len_split(size, idat_max));
    out[..SIGNATURE.len()].copy_from_slice(SIGNATURE);
    let mut at = SIGNATURE.len();
    let mut ihdr = [0u8; 13];
    ihdr[..4].copy_from_slice(&size.width.to_be_bytes());
    ihdr[4..8].copy_from_slice(&size.height.to_be_bytes());
    ihdr[8] = 8; // bit depth
    ihdr[9] = 2; // colour type: RGB
    // compression 0, filter 0, interlace 0
    let ihdr_at = at;
    put_chunk(out, &mut at, *b"IHDR", |data| data.copy_from_slice(&ihdr), 13);
    debug_assert_eq!(at - ihdr_at, 25);

    // The zlib stream is laid down first, then cut into IDAT chunks in place: the chunks'
    // headers are written by moving the stream's later parts right.
    let z = zlib_len(size);
    let chunks = z.div_ceil(idat_max);
    let stream_at = at + 8;
    write_zlib(pixels, size, &mut out[stream_at..stream_at + z]);
    // Move each chunk after the first right by the overheads before it, last first.
    for i in (1..chunks).rev() {
        let from = stream_at + i * idat_max;
        let n = idat_max.min(z - i * idat_max);
        out.copy_within(from..from + n, from + i * CHUNK_OVERHEAD);
    }
    for i in 0..chunks {
        let n = idat_max.min(z - i * idat_max);
        let data_at = at + 8;
        out[at..at + 4].copy_from_slice(&(n as u32).to_be_bytes());
        out[at + 4..at + 8].copy_from_slice(b"IDAT");
        let crc = crc32fast::hash(&out[at + 4..data_at + n]);
        out[data_at + n..data_at + n + 4].copy_from_slice(&crc.to_be_bytes());
        at = data_at + n + 4;
    }
    put_chunk(out, &mut at, *b"IEND", |_| {}, 0);
    debug_assert_eq!(at, out.len());
}

/// Writes one chunk whose `n` data bytes `fill` writes, at `at`, and moves `at` past it.
fn put_chunk(out: &mut [u8], at: &mut usize, kind: [u8; 4], fill: impl FnOnce(&mut [u8]), n: usize) {
    let start = *at;
    out[start..start + 4].copy_from_slice(&(n as u32).to_be_bytes());
    out[start + 4..start + 8].copy_from_slice(&kind);
    fill(&mut out[start + 8..start + 8 + n]);
    let crc = crc32fast::hash(&out[start + 4..start + 8 + n]);
    out[start + 8 + n..start + 12 + n].copy_from_slice(&crc.to_be_bytes());
    *at = start + 12 + n;
}

/// The zlib stream of the filtered scanlines in stored blocks, exactly [`zlib_len`] bytes.
fn write_zlib(pixels: &[u8], size: Size2, out: &mut [u8]) {
    // CMF: deflate, 32 KiB window; FLG: no dictionary, check bits making CMF*256+FLG % 31 == 0.
    out[0] = 0x78;
    out[1] = 0x01;
    let mut blocks = StoredBlocks { out, at: 2, left_in_block: 0, left: raw_len(size), adler: simd_adler32::Adler32::new() };
    if blocks.left == 0 {
        blocks.open_block();
    }
    let row = size.width as usize * 3;
    for line in pixels.chunks_exact(row.max(1)).take(size.height as usize) {
        blocks.put(&[0]);
        blocks.put(line);
    }
    let (at, sum) = (blocks.at, blocks.adler.finish());
    out[at..at + 4].copy_from_slice(&sum.to_be_bytes());
}

/// Raw data written as consecutive stored blocks, each opened when the last is full.
struct StoredBlocks<'a> {
    out: &'a mut [u8],
    at: usize,
    left_in_block: usize,
    /// Raw bytes still to write, over all blocks.
    left: usize,
    adler: simd_adler32::Adler32,
}

impl StoredBlocks<'_> {
    fn open_block(&mut self) {
        let n = self.left.min(STORED_MAX);
        let last = self.left <= STORED_MAX;
        let n16 = n as u16;
        self.out[self.at] = u8::from(last); // BFINAL, BTYPE 00 (stored)
        self.out[self.at + 1..self.at + 3].copy_from_slice(&n16.to_le_bytes());
        self.out[self.at + 3..self.at + 5].copy_from_slice(&(!n16).to_le_bytes());
        self.at += 5;
        self.left_in_block = n;
    }

    fn put(&mut self, mut data: &[u8]) {
        self.adler.write(data);
        while !data.is_empty() {
            if self.left_in_block == 0 {
                self.open_block();
            }
            let n = data.len().min(self.left_in_block);
            self.out[self.at..self.at + n].copy_from_slice(&data[..n]);
            self.at += n;
            self.left_in_block -= n;
            self.left -= n;
            data = &data[n..];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pixels(size: Size2) -> Vec<u8> {
        (0..size.area() as usize * 3).map(|i| (i * 7 % 251) as u8).collect()
    }

    #[test]
    fn pngs_decode_to_their_pixels_at_their_declared_length() {
        // Sizes around the 65,535-byte stored-block limit, and one row of one pixel.
        for (w, h) in [(1, 1), (3, 2), (224, 224), (21845, 1), (21844, 2), (100, 219), (500, 375)] {
            let size = Size2::new(w, h);
            let px = pixels(size);
            let mut out = vec![0u8; len(size) as usize];
            write(&px, size, &mut out);
            let decoded = image::load_from_memory_with_format(&out, image::ImageFormat::Png)
                .unwrap_or_else(|e| panic!("{w}x{h}: {e}"))
                .into_rgb8();
            assert_eq!(decoded.dimensions(), (w, h));
            assert_eq!(decoded.into_raw(), px, "{w}x{h}");
        }
    }

    #[test]
    fn a_stream_over_the_chunk_limit_is_split_into_idat_chunks_that_decode() {
        let size = Size2::new(300, 200);
        let px = pixels(size);
        let mut out = vec![0u8; len_split(size, 70_000) as usize];
        write_split(&px, size, &mut out, 70_000);
        assert_eq!(out.windows(4).filter(|w| w == b"IDAT").count(), zlib_len(size).div_ceil(70_000));
        let decoded = image::load_from_memory_with_format(&out, image::ImageFormat::Png).expect("decodes").into_rgb8();
        assert_eq!(decoded.into_raw(), px);
    }

    #[test]
    fn a_png_is_its_pixels_and_a_few_dozen_bytes() {
        let size = Size2::new(224, 224);
        // 224 rows of 1 + 672 bytes, 3 stored blocks, zlib and chunk framing.
        assert_eq!(len(size), 150_752 + 3 * 5 + 6 + 8 + 25 + 12 + 12);
    }
}
