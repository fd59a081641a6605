//! The `interpolation` argument of `resize` and `random_resized_crop`: torchvision v2's names
//! (`bilinear`, `bicubic`, both antialiased as torchvision does when downscaling) and timm's
//! `random`, which picks bilinear or bicubic per sample. [`Filter`] is what one sample resamples
//! with, after the draw.

use fast_image_resize::FilterType;
use rand::Rng;

/// What a configuration asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Interpolation {
    #[default]
    Bilinear,
    Bicubic,
    /// timm's `random`: bilinear or bicubic, drawn uniformly per sample.
    Random,
}

/// The filter one sample is resampled with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Filter {
    #[default]
    Bilinear,
    Bicubic,
}

impl Interpolation {
    /// The configuration's name of it.
    pub fn name(self) -> &'static str {
        match self {
            Interpolation::Bilinear => "bilinear",
            Interpolation::Bicubic => "bicubic",
            Interpolation::Random => "random",
        }
    }

    /// Reads a configured name; `None` for a name prepfs does not resample with.
    pub fn parse(name: &str) -> Option<Interpolation> {
        match name {
            "bilinear" => Some(Interpolation::Bilinear),
            "bicubic" => Some(Interpolation::Bicubic),
            "random" => Some(Interpolation::Random),
            _ => None,
        }
    }

    /// This sample's filter: `random` draws one (timm's `random.choice`), the others are fixed
    /// and draw nothing.
    pub fn draw(self, rng: &mut impl Rng) -> Filter {
        match self {
            Interpolation::Bilinear => Filter::Bilinear,
            Interpolation::Bicubic => Filter::Bicubic,
            Interpolation::Random => {
                if rng.gen::<bool>() {
                    Filter::Bicubic
                } else {
                    Filter::Bilinear
                }
            }
        }
    }
}

impl Filter {
    /// The resampler's convolution: Pillow's (and torchvision's antialiased) bilinear, and
    /// bicubic with a = -0.5 (Catmull-Rom), the kernel of Pillow and of torch's antialiased
    /// bicubic.
    pub(crate) fn filter_type(self) -> FilterType {
        match self {
            Filter::Bilinear => FilterType::Bilinear,
            Filter::Bicubic => FilterType::CatmullRom,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::draw::draw_rng;

    #[test]
    fn random_interpolation_picks_bilinear_and_bicubic_about_equally() {
        let mut rng = draw_rng(4, 0, 0, 0);
        let bicubic = (0..2000).filter(|_| Interpolation::Random.draw(&mut rng) == Filter::Bicubic).count();
        assert!((880..1120).contains(&bicubic), "{bicubic}");
        assert_eq!(Interpolation::Bicubic.draw(&mut rng), Filter::Bicubic);
        assert_eq!(Interpolation::parse("nearest"), None);
    }
}
