//! Synthetic ImageNet-like dataset generator, for testing and benchmarking prepfs without
//! downloading ImageNet.
//!
//! Writes an ImageFolder tree, `OUT/n00000000/n00000000_000000.JPEG` and so on, of images that
//! look to a codec like natural photos (smooth gradients, a few soft-edged shapes, fractal texture,
//! mild noise, one dominant hue per class), in the mix of encodings a real dataset makes a decoder
//! handle:
//!
//! - sizes jittered about the base size (±30%, a fifth portrait), a few tiny ones (64x48) and a
//!   few odd ones (333x257) that are not multiples of the JPEG MCU;
//! - JPEG quality 60-95; chroma subsampling 4:2:0 (most), 4:4:4, 4:2:2, 4:4:0; ~10% progressive;
//!   ~5% grayscale; ~2% CMYK (half YCCK, half plain CMYK, both flagged by an Adobe marker);
//!   ~5% with an EXIF APP1 segment (Orientation tag) right after SOI; `.JPEG` and `.jpg` names;
//! - ~3% PNG (RGB, plus exactly one RGBA and one grayscale);
//! - one non-image file, `README.txt`, in the first class.
//!
//! Each special variant is also forced onto one sample, so that any dataset of 13 or more images
//! contains all of them. `--bad` adds undecodable files named like images to the last class
//! (truncated, corrupt scan data, empty, text, a header claiming 20000x20000, a truncated PNG);
//! `--list-bad` prints their names. The output is a pure function of the arguments.
//!
//! ```text
//! cargo run --release --example make_dataset -- --out /tmp/ds --classes 10 --per-class 20 --bad
//! ```
//!
//! The last line of output is `wrote N images (M bad) in K classes to DIR, X MB`, where N counts
//! every file named like an image, the M bad ones included, and X is the total written in 10^6 bytes.

use std::error::Error;
use std::f32::consts::TAU;
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use clap::Parser;
use image::codecs::png::PngEncoder;
use image::{ExtendedColorType, ImageEncoder};
use indicatif::{ProgressBar, ProgressStyle};
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;
use rayon::prelude::*;
use turbojpeg::{Colorspace, Compressor, Image, PixelFormat, Subsamp};

type Result<T> = std::result::Result<T, Box<dyn Error + Send + Sync>>;

#[derive(Parser, Debug)]
#[command(about = "Write a synthetic ImageNet-like ImageFolder dataset")]
struct Args {
    /// Output directory (created if missing; existing files of the same names are overwritten).
    #[arg(long, required_unless_present = "list_bad")]
    out: Option<PathBuf>,
    /// Number of classes (directories).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    classes: u32,
    /// Images per class.
    #[arg(long, default_value_t = 20)]
    per_class: u32,
    /// Base image width, jittered per image.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(16..=16384))]
    width: u32,
    /// Base image height, jittered per image.
    #[arg(long, default_value_t = 375, value_parser = clap::value_parser!(u32).range(16..=16384))]
    height: u32,
    /// Seed of every random choice: the same arguments write the same bytes.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Also write undecodable files, named like images, into the last class.
    #[arg(long)]
    bad: bool,
    /// No progress bar and no mix summary; only the final line.
    #[arg(long)]
    quiet: bool,
    /// Print the names of the files `--bad` writes, one per line, and exit.
    #[arg(long)]
    list_bad: bool,
}

// ---------------------------------------------------------------------------------------------
// What to write: the plan of samples.

const SMALL_SIZES: [(u32, u32); 4] = [(64, 48), (48, 64), (96, 72), (80, 80)];
/// Sizes that are not multiples of 8 or 16, so the last MCU row and column are partial.
const ODD_SIZES: [(u32, u32); 5] = [(333, 257), (257, 333), (501, 379), (127, 95), (719, 541)];
const EXIF_ORIENTATIONS: [u16; 4] = [1, 3, 6, 8];

#[derive(Debug, Clone)]
struct Sample {
    class: u32,
    index: u32,
    width: u32,
    height: u32,
    encoding: Encoding,
    /// Seed of the content drawing, distinct per sample.
    seed: u64,
}

#[derive(Debug, Clone, Copy)]
enum Encoding {
    Jpeg(JpegParams),
    Png(PngColor),
}

#[derive(Debug, Clone, Copy)]
struct JpegParams {
    quality: i32,
    color: JpegColor,
    progressive: bool,
    exif: Option<Exif>,
    /// Named `.jpg` rather than ImageNet's `.JPEG`.
    short_ext: bool,
}

#[derive(Debug, Clone, Copy)]
enum JpegColor {
    YCbCr(Subsamp),
    Gray,
    /// CMYK pixels stored as YCCK (subsampled), with an Adobe marker.
    Ycck,
    /// CMYK pixels stored as they are, with an Adobe marker.
    Cmyk,
}

#[derive(Debug, Clone, Copy)]
struct Exif {
    orientation: u16,
    little_endian: bool,
}

#[derive(Debug, Clone, Copy)]
enum PngColor {
    Rgb,
    Rgba,
    Gray,
}

/// A variant put on one sample regardless of the random draw, so that small datasets have it too.
#[derive(Debug, Clone, Copy)]
enum Forced {
    Ycck,
    Cmyk,
    Gray,
    Progressive,
    Exif,
    Sub444,
    Sub422,
    Sub440,
    PngRgb,
    PngRgba,
    PngGray,
    Small,
    Odd,
}

impl Forced {
    const ALL: [Forced; 13] = [
        Forced::Ycck,
        Forced::Gray,
        Forced::Progressive,
        Forced::PngRgba,
        Forced::Exif,
        Forced::Sub444,
        Forced::Small,
        Forced::Cmyk,
        Forced::Sub422,
        Forced::PngGray,
        Forced::Sub440,
        Forced::Odd,
        Forced::PngRgb,
    ];
}

fn class_name(class: u32) -> String {
    format!("n{class:08}")
}

impl Sample {
    fn file_name(&self) -> String {
        let ext = match self.encoding {
            Encoding::Jpeg(JpegParams {
                short_ext: true, ..
            }) => "jpg",
            Encoding::Jpeg(_) => "JPEG",
            Encoding::Png(_) => "png",
        };
        format!("{}_{:06}.{ext}", class_name(self.class), self.index)
    }

    fn relative_path(&self) -> PathBuf {
        Path::new(&class_name(self.class)).join(self.file_name())
    }

    fn force(&mut self, forced: Forced, rng: &mut Pcg64) {
        match forced {
            Forced::Ycck => self.edit_jpeg(rng, |p| p.color = JpegColor::Ycck),
            Forced::Cmyk => self.edit_jpeg(rng, |p| p.color = JpegColor::Cmyk),
            Forced::Gray => self.edit_jpeg(rng, |p| p.color = JpegColor::Gray),
            Forced::Progressive => self.edit_jpeg(rng, |p| p.progressive = true),
            Forced::Exif => self.edit_jpeg(rng, |p| {
                p.exif = Some(Exif {
                    orientation: 6,
                    little_endian: false,
                });
            }),
            Forced::Sub444 => self.edit_jpeg(rng, |p| p.color = JpegColor::YCbCr(Subsamp::None)),
            Forced::Sub422 => self.edit_jpeg(rng, |p| p.color = JpegColor::YCbCr(Subsamp::Sub2x1)),
            Forced::Sub440 => self.edit_jpeg(rng, |p| p.color = JpegColor::YCbCr(Subsamp::Sub1x2)),
            Forced::PngRgb => self.encoding = Encoding::Png(PngColor::Rgb),
            Forced::PngRgba => self.encoding = Encoding::Png(PngColor::Rgba),
            Forced::PngGray => self.encoding = Encoding::Png(PngColor::Gray),
            Forced::Small => (self.width, self.height) = SMALL_SIZES[0],
            Forced::Odd => (self.width, self.height) = ODD_SIZES[0],
        }
    }

    /// Edits the JPEG parameters, making the sample a JPEG first if it was a PNG.
    fn edit_jpeg(&mut self, rng: &mut Pcg64, edit: impl FnOnce(&mut JpegParams)) {
        let mut params = match self.encoding {
            Encoding::Jpeg(params) => params,
            Encoding::Png(_) => random_jpeg(rng),
        };
        edit(&mut params);
        self.encoding = Encoding::Jpeg(params);
    }
}

/// Every sample of the dataset, class by class; a pure function of the arguments.
fn plan(args: &Args) -> Vec<Sample> {
    let mut rng = Pcg64::seed_from_u64(args.seed);
    let base = (args.width, args.height);
    let mut samples = Vec::with_capacity(args.classes as usize * args.per_class as usize);
    for class in 0..args.classes {
        for index in 0..args.per_class {
            samples.push(random_sample(&mut rng, class, index, base));
        }
    }
    // Spread the forced variants over the dataset, one per equal stretch of samples.
    let n = samples.len();
    if n > 0 {
        let k = Forced::ALL.len();
        for (j, forced) in Forced::ALL.into_iter().enumerate() {
            samples[(2 * j + 1) * n / (2 * k)].force(forced, &mut rng);
        }
    }
    samples
}

fn random_sample(rng: &mut Pcg64, class: u32, index: u32, base: (u32, u32)) -> Sample {
    let (width, height) = random_size(rng, base);
    let encoding = if rng.gen_bool(0.03) {
        Encoding::Png(PngColor::Rgb)
    } else {
        Encoding::Jpeg(random_jpeg(rng))
    };
    Sample {
        class,
        index,
        width,
        height,
        encoding,
        seed: rng.gen(),
    }
}

fn random_size(rng: &mut Pcg64, (width, height): (u32, u32)) -> (u32, u32) {
    let roll: f64 = rng.gen();
    if roll < 0.03 {
        return SMALL_SIZES[rng.gen_range(0..SMALL_SIZES.len())];
    }
    if roll < 0.06 {
        return ODD_SIZES[rng.gen_range(0..ODD_SIZES.len())];
    }
    let scale = rng.gen_range(0.7..1.3);
    let aspect = rng.gen_range(0.9..1.1);
    let jitter = |side: u32, factor: f64| ((f64::from(side) * factor).round() as u32).max(16);
    let (w, h) = (
        jitter(width, scale * aspect),
        jitter(height, scale / aspect),
    );
    if rng.gen_bool(0.2) {
        (h, w)
    } else {
        (w, h)
    }
}

fn random_jpeg(rng: &mut Pcg64) -> JpegParams {
    let roll: f64 = rng.gen();
    let color = match roll {
        r if r < 0.05 => JpegColor::Gray,
        r if r < 0.06 => JpegColor::Ycck,
        r if r < 0.07 => JpegColor::Cmyk,
        _ => JpegColor::YCbCr(random_subsamp(rng)),
    };
    JpegParams {
        quality: rng.gen_range(60..=95),
        color,
        progressive: rng.gen_bool(0.10),
        exif: rng.gen_bool(0.05).then(|| Exif {
            orientation: EXIF_ORIENTATIONS[rng.gen_range(0..EXIF_ORIENTATIONS.len())],
            little_endian: rng.gen(),
        }),
        short_ext: rng.gen_bool(0.25),
    }
}

fn random_subsamp(rng: &mut Pcg64) -> Subsamp {
    match rng.gen_range(0..100) {
        0..=59 => Subsamp::Sub2x2,
        60..=74 => Subsamp::None,
        75..=89 => Subsamp::Sub2x1,
        _ => Subsamp::Sub1x2,
    }
}

// ---------------------------------------------------------------------------------------------
// Content: something that compresses like a photo.

/// An RGB image in floats on the 0-255 scale, drawn on before quantization.
struct Canvas {
    width: usize,
    height: usize,
    pixels: Vec<[f32; 3]>,
    /// A texture field in about [-1, 1] that the background and each shape modulate their
    /// brightness with, each at its own strength.
    texture: Vec<f32>,
}

/// An ellipse or a rectangle, with a soft (anti-aliased) edge and a shading gradient across it.
struct Shape {
    cx: f32,
    cy: f32,
    half_w: f32,
    half_h: f32,
    ellipse: bool,
    color: [f32; 3],
    opacity: f32,
    /// Relative brightness change from one side of the shape to the other.
    shade: f32,
    /// How strongly the canvas texture shows on the shape.
    texture: f32,
}

/// The class's dominant hue, spread around the colour wheel by the golden ratio.
fn class_hue(class: u32) -> f32 {
    (class as f32 * 0.618_034).fract()
}

/// Renders a sample's content as packed RGB8.
fn render(width: u32, height: u32, hue: f32, seed: u64) -> Vec<u8> {
    let mut rng = Pcg64::seed_from_u64(seed);
    let mut canvas = Canvas::new(&mut rng, width as usize, height as usize);
    canvas.paint_background(&mut rng, hue);
    for _ in 0..rng.gen_range(3..=8) {
        let shape = Shape::random(&mut rng, canvas.width, canvas.height, hue);
        canvas.draw(&shape);
    }
    canvas.quantize(&mut rng)
}

impl Canvas {
    fn new(rng: &mut Pcg64, width: usize, height: usize) -> Self {
        let texture = fractal_noise(rng, width, height);
        Canvas {
            width,
            height,
            pixels: vec![[0.0; 3]; width * height],
            texture,
        }
    }

    /// A linear gradient between two colours near `hue`, lit by one broad soft light.
    fn paint_background(&mut self, rng: &mut Pcg64, hue: f32) {
        let (from, to) = (random_color(rng, hue, 0.06), random_color(rng, hue, 0.06));
        let angle = rng.gen_range(0.0..TAU);
        let (dx, dy) = (angle.cos(), angle.sin());
        let (w, h) = (self.width as f32, self.height as f32);
        let extent = (w * dx.abs() + h * dy.abs()).max(1.0);
        let (light_x, light_y) = (rng.gen_range(0.0..w), rng.gen_range(0.0..h));
        let light_radius = (w * w + h * h).sqrt() * rng.gen_range(0.3..0.8);
        let light = rng.gen_range(0.1..0.35);
        let texture = rng.gen_range(0.2..1.2);
        for (i, (pixel, grain)) in self.pixels.iter_mut().zip(&self.texture).enumerate() {
            let (x, y) = ((i % self.width) as f32, (i / self.width) as f32);
            let t = smoothstep(((x - w / 2.0) * dx + (y - h / 2.0) * dy) / extent + 0.5);
            let d2 = ((x - light_x).powi(2) + (y - light_y).powi(2)) / light_radius.powi(2);
            let lit = (1.0 - light + 2.0 * light * (-d2).exp()) * (1.0 + texture * grain);
            for c in 0..3 {
                pixel[c] = (from[c] + (to[c] - from[c]) * t) * lit;
            }
        }
    }

    fn draw(&mut self, shape: &Shape) {
        let (x0, x1) = span(shape.cx, shape.half_w, self.width);
        let (y0, y1) = span(shape.cy, shape.half_h, self.height);
        for y in y0..y1 {
            for x in x0..x1 {
                let (fx, fy) = (x as f32 + 0.5, y as f32 + 0.5);
                let alpha = shape.coverage(fx, fy) * shape.opacity;
                if alpha <= 0.0 {
                    continue;
                }
                let i = y * self.width + x;
                let brightness = (1.0 + shape.shade * (fx - shape.cx) / (2.0 * shape.half_w))
                    * (1.0 + shape.texture * self.texture[i]);
                let pixel = &mut self.pixels[i];
                for (value, color) in pixel.iter_mut().zip(shape.color) {
                    *value += (color * brightness - *value) * alpha;
                }
            }
        }
    }

    /// Adds mild triangular noise and rounds to RGB8.
    fn quantize(&self, rng: &mut Pcg64) -> Vec<u8> {
        let amplitude = rng.gen_range(2.0..7.0f32);
        self.pixels
            .iter()
            .flatten()
            .map(|&value| {
                let noise = (rng.gen::<f32>() - rng.gen::<f32>()) * amplitude;
                (value + noise).round().clamp(0.0, 255.0) as u8
            })
            .collect()
    }
}

impl Shape {
    fn random(rng: &mut Pcg64, width: usize, height: usize, hue: f32) -> Shape {
        let min_side = width.min(height) as f32;
        let half_w = min_side * rng.gen_range(0.05..0.35);
        let color_hue = if rng.gen_bool(0.65) { hue } else { rng.gen() };
        Shape {
            cx: rng.gen_range(0.0..width as f32),
            cy: rng.gen_range(0.0..height as f32),
            half_w,
            half_h: half_w * rng.gen_range(0.5..1.5),
            ellipse: rng.gen_bool(0.5),
            color: random_color(rng, color_hue, 0.08),
            opacity: rng.gen_range(0.55..1.0),
            shade: rng.gen_range(-0.3..0.3),
            texture: rng.gen_range(0.0..1.2),
        }
    }

    /// How much of the pixel centred at (x, y) the shape covers, 0 to 1, over a 1-pixel edge.
    fn coverage(&self, x: f32, y: f32) -> f32 {
        let (dx, dy) = (x - self.cx, y - self.cy);
        let outside = if self.ellipse {
            let q = ((dx / self.half_w).powi(2) + (dy / self.half_h).powi(2)).sqrt();
            (q - 1.0) * self.half_w.min(self.half_h)
        } else {
            (dx.abs() - self.half_w).max(dy.abs() - self.half_h)
        };
        (0.5 - outside).clamp(0.0, 1.0)
    }
}

/// The pixel range `[start, end)` that `centre ± half` (plus the soft edge) covers, clipped.
fn span(centre: f32, half: f32, len: usize) -> (usize, usize) {
    let start = (centre - half - 1.0).floor().max(0.0) as usize;
    let end = ((centre + half + 2.0).ceil().max(0.0) as usize).min(len);
    (start.min(end), end)
}

/// Fractal value noise in about [-1, 1]: octaves of smoothly interpolated random lattices, from
/// 64-pixel cells down to 2-pixel ones, finer octaves weaker, like the texture of natural scenes.
fn fractal_noise(rng: &mut Pcg64, width: usize, height: usize) -> Vec<f32> {
    let mut field = vec![0.0f32; width * height];
    let mut total = 0.0;
    for cell in [64usize, 32, 16, 8, 4, 2] {
        let amplitude = (cell as f32).powf(0.25);
        total += amplitude;
        let lattice_w = width / cell + 2;
        let lattice: Vec<f32> = (0..lattice_w * (height / cell + 2))
            .map(|_| rng.gen_range(-1.0..1.0))
            .collect();
        for (y, row) in field.chunks_exact_mut(width).enumerate() {
            let (j, ty) = (y / cell, smoothstep((y % cell) as f32 / cell as f32));
            let (above, below) = (&lattice[j * lattice_w..], &lattice[(j + 1) * lattice_w..]);
            for (x, value) in row.iter_mut().enumerate() {
                let (i, tx) = (x / cell, smoothstep((x % cell) as f32 / cell as f32));
                let top = above[i] + (above[i + 1] - above[i]) * tx;
                let bottom = below[i] + (below[i + 1] - below[i]) * tx;
                *value += amplitude * (top + (bottom - top) * ty);
            }
        }
    }
    for value in &mut field {
        *value /= total;
    }
    field
}

fn smoothstep(t: f32) -> f32 {
    let t = t.clamp(0.0, 1.0);
    t * t * (3.0 - 2.0 * t)
}

/// A colour of about `hue` (± `spread`), of random saturation and value, on the 0-255 scale.
fn random_color(rng: &mut Pcg64, hue: f32, spread: f32) -> [f32; 3] {
    let hue = (hue + rng.gen_range(-spread..spread)).rem_euclid(1.0);
    hsv_to_rgb(hue, rng.gen_range(0.25..0.85), rng.gen_range(0.25..0.95)).map(|c| c * 255.0)
}

fn hsv_to_rgb(hue: f32, saturation: f32, value: f32) -> [f32; 3] {
    let h = hue * 6.0;
    let f = h.fract();
    let (p, q, t) = (
        value * (1.0 - saturation),
        value * (1.0 - saturation * f),
        value * (1.0 - saturation * (1.0 - f)),
    );
    match h as u32 % 6 {
        0 => [value, t, p],
        1 => [q, value, p],
        2 => [p, value, t],
        3 => [p, q, value],
        4 => [t, p, value],
        _ => [value, p, q],
    }
}

// ---------------------------------------------------------------------------------------------
// Encoding.

fn encode(sample: &Sample, rgb: &[u8]) -> Result<Vec<u8>> {
    let (width, height) = (sample.width as usize, sample.height as usize);
    match sample.encoding {
        Encoding::Jpeg(params) => encode_jpeg(rgb, width, height, &params),
        Encoding::Png(color) => encode_png(rgb, sample.width, sample.height, color),
    }
}

fn encode_jpeg(rgb: &[u8], width: usize, height: usize, params: &JpegParams) -> Result<Vec<u8>> {
    let mut compressor = Compressor::new()?;
    compressor.set_quality(params.quality)?;
    compressor.set_progressive(params.progressive)?;
    let (subsamp, colorspace) = match params.color {
        JpegColor::YCbCr(subsamp) => (subsamp, Colorspace::YCbCr),
        JpegColor::Gray => (Subsamp::Gray, Colorspace::Gray),
        JpegColor::Ycck => (Subsamp::Sub2x2, Colorspace::YCCK),
        JpegColor::Cmyk => (Subsamp::None, Colorspace::CMYK),
    };
    compressor.set_subsamp(subsamp)?;
    compressor.set_colorspace(colorspace)?;

    let cmyk;
    let (pixels, format) = match params.color {
        JpegColor::Ycck | JpegColor::Cmyk => {
            cmyk = rgb_to_adobe_cmyk(rgb);
            (cmyk.as_slice(), PixelFormat::CMYK)
        }
        JpegColor::YCbCr(_) | JpegColor::Gray => (rgb, PixelFormat::RGB),
    };
    let image = Image {
        pixels,
        width,
        pitch: width * format.size(),
        height,
        format,
    };
    let jpeg = compressor.compress_to_vec(image)?;
    Ok(match params.exif {
        Some(exif) => insert_after_soi(&jpeg, &exif_segment(exif)),
        None => jpeg,
    })
}

/// RGB to CMYK as Adobe stores it in JPEG files (inverted: 255 means no ink), which is what
/// readers assume when the Adobe marker is present; PIL's `convert("RGB")` gives back the RGB.
fn rgb_to_adobe_cmyk(rgb: &[u8]) -> Vec<u8> {
    rgb.chunks_exact(3)
        .flat_map(|p| {
            let max = p[0].max(p[1]).max(p[2]);
            let scale = |c: u8| match max {
                0 => 255,
                _ => ((u32::from(c) * 255 + u32::from(max) / 2) / u32::from(max)) as u8,
            };
            [scale(p[0]), scale(p[1]), scale(p[2]), max]
        })
        .collect()
}

/// An EXIF APP1 segment holding a minimal TIFF structure: IFD0 with a single Orientation tag.
fn exif_segment(exif: Exif) -> Vec<u8> {
    let le = exif.little_endian;
    let u16_bytes = |v: u16| if le { v.to_le_bytes() } else { v.to_be_bytes() };
    let u32_bytes = |v: u32| if le { v.to_le_bytes() } else { v.to_be_bytes() };
    let mut tiff = Vec::with_capacity(26);
    tiff.extend_from_slice(if le { b"II" } else { b"MM" });
    tiff.extend(u16_bytes(42));
    tiff.extend(u32_bytes(8)); // IFD0 follows the header
    tiff.extend(u16_bytes(1)); // one entry:
    tiff.extend(u16_bytes(0x0112)); // Orientation,
    tiff.extend(u16_bytes(3)); // SHORT,
    tiff.extend(u32_bytes(1)); // count 1,
    tiff.extend(u16_bytes(exif.orientation)); // value, left-justified in the 4-byte field
    tiff.extend([0, 0]);
    tiff.extend(u32_bytes(0)); // no IFD1

    let payload_len = b"Exif\0\0".len() + tiff.len();
    let mut segment = vec![0xFF, 0xE1];
    segment.extend(((payload_len + 2) as u16).to_be_bytes());
    segment.extend_from_slice(b"Exif\0\0");
    segment.extend(tiff);
    segment
}

fn insert_after_soi(jpeg: &[u8], segment: &[u8]) -> Vec<u8> {
    let (soi, rest) = jpeg.split_at(2);
    [soi, segment, rest].concat()
}

fn encode_png(rgb: &[u8], width: u32, height: u32, color: PngColor) -> Result<Vec<u8>> {
    let (pixels, color_type) = match color {
        PngColor::Rgb => (rgb.to_vec(), ExtendedColorType::Rgb8),
        PngColor::Rgba => (
            with_vignette_alpha(rgb, width as usize),
            ExtendedColorType::Rgba8,
        ),
        PngColor::Gray => (luma(rgb), ExtendedColorType::L8),
    };
    let mut png = Vec::new();
    PngEncoder::new(&mut png).write_image(&pixels, width, height, color_type)?;
    Ok(png)
}

/// RGBA with an alpha that fades from opaque at the centre to a quarter at the corners.
fn with_vignette_alpha(rgb: &[u8], width: usize) -> Vec<u8> {
    let height = rgb.len() / 3 / width.max(1);
    let (cx, cy) = (width as f32 / 2.0, height as f32 / 2.0);
    let max_d2 = cx * cx + cy * cy;
    rgb.chunks_exact(3)
        .enumerate()
        .flat_map(|(i, p)| {
            let (dx, dy) = ((i % width) as f32 - cx, (i / width) as f32 - cy);
            let alpha = 255.0 * (1.0 - 0.75 * (dx * dx + dy * dy) / max_d2);
            [p[0], p[1], p[2], alpha.round() as u8]
        })
        .collect()
}

fn luma(rgb: &[u8]) -> Vec<u8> {
    rgb.chunks_exact(3)
        .map(|p| {
            let [r, g, b] = [p[0], p[1], p[2]].map(u32::from);
            ((299 * r + 587 * g + 114 * b + 500) / 1000) as u8
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The corpus of bad files.

#[derive(Debug, Clone, Copy)]
enum BadKind {
    Truncated,
    Corrupt,
    Empty,
    Text,
    Huge,
    TruncatedPng,
}

impl BadKind {
    const ALL: [BadKind; 6] = [
        BadKind::Truncated,
        BadKind::Corrupt,
        BadKind::Empty,
        BadKind::Text,
        BadKind::Huge,
        BadKind::TruncatedPng,
    ];

    fn file_name(self) -> &'static str {
        match self {
            BadKind::Truncated => "bad_truncated.jpg",
            BadKind::Corrupt => "bad_corrupt.jpg",
            BadKind::Empty => "bad_empty.jpg",
            BadKind::Text => "bad_text.jpg",
            BadKind::Huge => "bad_huge.jpg",
            BadKind::TruncatedPng => "bad_png.png",
        }
    }

    fn contents(self, rng: &mut Pcg64, (width, height): (u32, u32)) -> Result<Vec<u8>> {
        Ok(match self {
            BadKind::Truncated => {
                let jpeg = baseline_jpeg(rng, width, height)?;
                jpeg[..jpeg.len() * 2 / 5].to_vec()
            }
            BadKind::Corrupt => corrupt_scan(&baseline_jpeg(rng, width, height)?, rng)?,
            BadKind::Empty => Vec::new(),
            BadKind::Text => b"This is not an image, whatever its name says.\n".repeat(20),
            BadKind::Huge => claim_size(&baseline_jpeg(rng, 64, 48)?, 20_000, 20_000)?,
            BadKind::TruncatedPng => {
                let rgb = render(96, 72, rng.gen(), rng.gen());
                let png = encode_png(&rgb, 96, 72, PngColor::Rgb)?;
                png[..png.len() / 2].to_vec()
            }
        })
    }
}

/// A valid baseline (SOF0) 4:2:0 JPEG of random content.
fn baseline_jpeg(rng: &mut Pcg64, width: u32, height: u32) -> Result<Vec<u8>> {
    let rgb = render(width, height, rng.gen(), rng.gen());
    let params = JpegParams {
        quality: 90,
        color: JpegColor::YCbCr(Subsamp::Sub2x2),
        progressive: false,
        exif: None,
        short_ext: true,
    };
    encode_jpeg(&rgb, width as usize, height as usize, &params)
}

/// Finds the first marker segment `marker` before the scan data; returns the offset and length
/// of its payload (what follows the 2-byte length field).
fn find_segment(jpeg: &[u8], marker: u8) -> Result<(usize, usize)> {
    let mut pos = 2; // past SOI
    while let [0xFF, found, len_hi, len_lo, ..] = jpeg[pos.min(jpeg.len())..] {
        let payload_len = usize::from(u16::from_be_bytes([len_hi, len_lo])).saturating_sub(2);
        if found == marker {
            return Ok((pos + 4, payload_len));
        }
        if found == 0xDA {
            break; // entropy-coded data follows SOS
        }
        pos += 4 + payload_len;
    }
    Err(format!("no marker 0xFF{marker:02X} in the JPEG headers").into())
}

/// Replaces the entropy-coded data after SOS with random bytes that contain a stray SOI marker:
/// libjpeg only warns about bad Huffman codes, but a second SOI is a fatal error for every reader.
fn corrupt_scan(jpeg: &[u8], rng: &mut Pcg64) -> Result<Vec<u8>> {
    let (sos, sos_len) = find_segment(jpeg, 0xDA)?;
    let scan_start = sos + sos_len;
    let scan_end = jpeg.len().saturating_sub(2).max(scan_start); // keep EOI
    let middle = scan_start + (scan_end - scan_start) / 2;
    let mut out = jpeg[..scan_start].to_vec();
    push_garbage(&mut out, middle, rng);
    out.extend([0xFF, 0xD8]);
    push_garbage(&mut out, scan_end, rng);
    out.extend([0xFF, 0xD9]);
    Ok(out)
}

/// Appends random bytes, byte-stuffed as in scan data (0xFF 0x00), until `out` is `len` long.
fn push_garbage(out: &mut Vec<u8>, len: usize, rng: &mut Pcg64) {
    while out.len() < len {
        let byte: u8 = rng.gen();
        out.push(byte);
        if byte == 0xFF {
            out.push(0x00);
        }
    }
}

/// Patches the SOF0 header to claim `width` x `height` pixels (the scan data stays small).
fn claim_size(jpeg: &[u8], width: u16, height: u16) -> Result<Vec<u8>> {
    let (sof, _) = find_segment(jpeg, 0xC0)?;
    let mut out = jpeg.to_vec();
    // SOF payload: precision (1 byte), height (2), width (2), components...
    out[sof + 1..sof + 3].copy_from_slice(&height.to_be_bytes());
    out[sof + 3..sof + 5].copy_from_slice(&width.to_be_bytes());
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Writing the tree.

fn write_file(path: &Path, bytes: &[u8]) -> Result<u64> {
    fs::write(path, bytes).map_err(|e| format!("writing {}: {e}", path.display()))?;
    Ok(bytes.len() as u64)
}

fn write_sample(out: &Path, sample: &Sample) -> Result<u64> {
    let rgb = render(
        sample.width,
        sample.height,
        class_hue(sample.class),
        sample.seed,
    );
    let bytes = encode(sample, &rgb)?;
    write_file(&out.join(sample.relative_path()), &bytes)
}

fn write_readme(out: &Path, args: &Args) -> Result<u64> {
    let bad_note = if args.bad {
        format!(
            "The bad_* files in {} are undecodable on purpose.\n",
            class_name(args.classes - 1)
        )
    } else {
        String::new()
    };
    let text = format!(
        "Synthetic ImageNet-like dataset written by prepfs's examples/make_dataset.rs\n\
         ({} classes x {} images, base size {}x{}, seed {}).\n\
         This file is not an image: prepfs shows it under encoded/ only.\n{bad_note}",
        args.classes, args.per_class, args.width, args.height, args.seed
    );
    write_file(&out.join(class_name(0)).join("README.txt"), text.as_bytes())
}

fn write_bad_files(out: &Path, args: &Args) -> Result<u64> {
    // A stream of its own, so that --bad leaves the good images unchanged.
    let mut rng = Pcg64::seed_from_u64(args.seed ^ 0xBAD0_BAD0_BAD0_BAD0);
    let dir = out.join(class_name(args.classes - 1));
    let mut total = 0;
    for kind in BadKind::ALL {
        let bytes = kind.contents(&mut rng, (args.width, args.height))?;
        total += write_file(&dir.join(kind.file_name()), &bytes)?;
    }
    Ok(total)
}

fn progress_bar(len: usize, quiet: bool) -> Result<ProgressBar> {
    if quiet {
        return Ok(ProgressBar::hidden());
    }
    let style = ProgressStyle::with_template("{bar:40} {pos}/{len} images, {elapsed} (eta {eta})")?;
    Ok(ProgressBar::new(len as u64).with_style(style))
}

/// Counts of each variant in the plan, printed unless `--quiet`.
#[derive(Default)]
struct Mix {
    jpeg: usize,
    subsamp: [usize; 4], // 4:2:0, 4:4:4, 4:2:2, 4:4:0
    gray: usize,
    ycck: usize,
    cmyk: usize,
    progressive: usize,
    exif: usize,
    short_ext: usize,
    png: [usize; 3], // RGB, RGBA, gray
    small: usize,
    odd: usize,
    portrait: usize,
}

impl Mix {
    fn of(samples: &[Sample]) -> Mix {
        let mut mix = Mix::default();
        for sample in samples {
            let size = (sample.width, sample.height);
            mix.small += usize::from(SMALL_SIZES.contains(&size));
            mix.odd += usize::from(ODD_SIZES.contains(&size));
            mix.portrait += usize::from(sample.height > sample.width);
            match sample.encoding {
                Encoding::Jpeg(params) => mix.add_jpeg(&params),
                Encoding::Png(color) => mix.png[color as usize] += 1,
            }
        }
        mix
    }

    fn add_jpeg(&mut self, params: &JpegParams) {
        self.jpeg += 1;
        self.progressive += usize::from(params.progressive);
        self.exif += usize::from(params.exif.is_some());
        self.short_ext += usize::from(params.short_ext);
        match params.color {
            JpegColor::YCbCr(Subsamp::Sub2x2) => self.subsamp[0] += 1,
            JpegColor::YCbCr(Subsamp::None) => self.subsamp[1] += 1,
            JpegColor::YCbCr(Subsamp::Sub2x1) => self.subsamp[2] += 1,
            JpegColor::YCbCr(_) => self.subsamp[3] += 1,
            JpegColor::Gray => self.gray += 1,
            JpegColor::Ycck => self.ycck += 1,
            JpegColor::Cmyk => self.cmyk += 1,
        }
    }
}

impl fmt::Display for Mix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [s420, s444, s422, s440] = self.subsamp;
        let [rgb, rgba, gray] = self.png;
        write!(
            f,
            "{} JPEG (4:2:0 {s420}, 4:4:4 {s444}, 4:2:2 {s422}, 4:4:0 {s440}, gray {}, YCCK {}, \
             CMYK {}; progressive {}, EXIF {}, .jpg {}), {} PNG (RGB {rgb}, RGBA {rgba}, gray {gray}); \
             sizes: {} small, {} odd, {} portrait",
            self.jpeg,
            self.gray,
            self.ycck,
            self.cmyk,
            self.progressive,
            self.exif,
            self.short_ext,
            rgb + rgba + gray,
            self.small,
            self.odd,
            self.portrait,
        )
    }
}

fn main() -> Result<()> {
    let args = Args::parse();
    if args.list_bad {
        for kind in BadKind::ALL {
            println!("{}", kind.file_name());
        }
        return Ok(());
    }
    let out = args.out.as_deref().ok_or("--out is required")?;

    let samples = plan(&args);
    for class in 0..args.classes {
        let dir = out.join(class_name(class));
        fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    }
    let progress = progress_bar(samples.len(), args.quiet)?;
    let image_bytes = samples
        .par_iter()
        .map(|sample| {
            let written = write_sample(out, sample);
            progress.inc(1);
            written
        })
        .sum::<Result<u64>>()?;
    progress.finish_and_clear();

    let mut total_bytes = image_bytes + write_readme(out, &args)?;
    let bad = if args.bad {
        total_bytes += write_bad_files(out, &args)?;
        BadKind::ALL.len()
    } else {
        0
    };
    if !args.quiet {
        eprintln!("mix: {}", Mix::of(&samples));
    }
    println!(
        "wrote {} images ({bad} bad) in {} classes to {}, {:.1} MB",
        samples.len() + bad,
        args.classes,
        out.display(),
        total_bytes as f64 / 1e6
    );
    Ok(())
}
