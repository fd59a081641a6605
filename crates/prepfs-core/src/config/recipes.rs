//! `recipes:`: named augmentation pipelines, each served as a view of its own beside
//! `augmented/` (`MNT/<name>/...`, `jobs/<job>/<name>/...`), each with its `augment:` list and
//! its `output:` (the top-level `output:` as written when it has none). The rules a recipe's
//! name must follow (a plain name, no view's name) and the `augment:` list's parse, which the
//! top-level `augment:` shares, are here.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_norway::Value;

use super::error::ConfigError;
use super::output::validate_output;
use prepfs_pixels::output_config::OutputConfig;
use prepfs_pixels::augment::AugmentOp;
use prepfs_cache::form::Form;

/// The most recipes one mount serves: a recipe's number has 4 bits in inode numbers
/// (`fs::inodes`), 0 being `augmented/` itself.
pub(crate) const MAX_RECIPES: usize = 15;
/// The longest recipe name.
const MAX_NAME: usize = 64;
/// Names the mount's root shows besides the forms' views: no recipe may take them.
const ROOT_NAMES: [&str; 2] = ["jobs", ".prepfs"];

/// One named pipeline and how its outputs are written.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Recipe {
    /// The view's directory name.
    #[serde(skip)]
    pub(crate) name: String,
    /// The pipeline, in order.
    pub(crate) augment: Vec<AugmentOp>,
    /// How its outputs are written (its `normalize` folded in).
    pub(crate) output: OutputConfig,
}

/// A recipe as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRecipe {
    augment: Vec<BTreeMap<String, Value>>,
    #[serde(default)]
    output: Option<OutputConfig>,
}

/// An `augment:` list parsed, each op refused with its place named (`key` is where the list
/// is: `augment`, or `recipes.<name>.augment`).
pub(super) fn augment_ops(text: &str, key: &str, list: &[BTreeMap<String, Value>]) -> Result<Vec<AugmentOp>, ConfigError> {
    let mut ops = Vec::with_capacity(list.len());
    for (i, entry) in list.iter().enumerate() {
        let op = AugmentOp::from_yaml(entry).map_err(|why| {
            let op_key = entry.keys().next().map_or("augment", String::as_str);
            ConfigError::at(text, op_key, format!("{key}[{i}]: {why}"))
        })?;
        ops.push(op);
    }
    Ok(ops)
}

/// Why `name` cannot name a recipe, if it cannot: it must be a plain name (ASCII letters,
/// digits, `_` and `-`, not starting with `-`, at most 64 bytes) that no view of the mount's
/// root has.
pub(crate) fn refuse_name(name: &str) -> Option<String> {
    if Form::ALL.iter().any(|f| f.dir_name() == name) || ROOT_NAMES.contains(&name) {
        return Some(format!("recipe `{name}` clashes with the mount's own `{name}/`; name it otherwise"));
    }
    let plain = !name.is_empty()
        && name.len() <= MAX_NAME
        && !name.starts_with('-')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    (!plain).then(|| {
        format!("recipe name `{name}` is not a plain name: use ASCII letters, digits, `_` and `-` (at most {MAX_NAME}, not starting with `-`)")
    })
}

/// The recipes validated, in name order. `written_output` is the top-level `output:` as
/// written (before the top-level `normalize` is folded in): a recipe without its own starts
/// from it.
pub(super) fn recipes_config(
    text: &str,
    raw: Option<BTreeMap<String, RawRecipe>>,
    written_output: &OutputConfig,
) -> Result<Vec<Recipe>, ConfigError> {
    let raw = raw.unwrap_or_default();
    if raw.len() > MAX_RECIPES {
        return Err(ConfigError::at(text, "recipes", format!("{} recipes; a mount serves at most {MAX_RECIPES}", raw.len())));
    }
    let mut recipes = Vec::with_capacity(raw.len());
    for (name, r) in raw {
        if let Some(why) = refuse_name(&name) {
            return Err(ConfigError::at(text, &format!("recipes.{name}"), why));
        }
        let key = format!("recipes.{name}.augment");
        let augment = augment_ops(text, &key, &r.augment)?;
        let mut output = r.output.unwrap_or_else(|| written_output.clone());
        validate_output(text, &mut output, &augment)
            .map_err(|e| ConfigError::plain(format!("recipe `{name}`: {}", e.message)))?;
        recipes.push(Recipe { name, augment, output });
    }
    Ok(recipes)
}

#[cfg(test)]
mod tests {
    use super::super::{Config, ConfigError, Dtype, Format, Overrides};
    use prepfs_pixels::rgb::Size2;

    fn parse(yaml: &str) -> Result<Config, ConfigError> {
        let overrides = Overrides { source: Some(std::env::temp_dir()), mountpoint: Some("/mnt/x".into()), seed: None };
        Config::parse(yaml, &overrides)
    }

    const TWO: &str = "recipes:\n  val: { augment: [ {resize: {size: 232}}, {center_crop: {size: 224}} ] }\n  ta:\n    augment: [ {random_resized_crop: {size: 176}}, {random_horizontal_flip: {}} ]\n    output: { format: npy }\n";

    #[test]
    fn recipes_are_parsed_in_name_order_with_their_own_output_or_the_top_level_one() {
        let c = parse(&format!("output: {{ format: png }}\n{TWO}")).expect("valid");
        let names: Vec<&str> = c.recipes.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["ta", "val"]);
        assert_eq!(c.recipes[0].output.format, Format::Npy, "ta's own output");
        assert_eq!(c.recipes[1].output.format, Format::Png, "val's is the top-level one");
        assert_eq!(prepfs_pixels::augment::fixed_output_size(&c.recipes[0].augment), Some(Size2::new(176, 176)));
        assert_eq!(c.augment, prepfs_pixels::augment::AugmentOp::imagenet_train(), "augmented/ keeps the top-level augment");
    }

    #[test]
    fn a_recipe_normalizes_into_its_own_output_only() {
        let yaml = "output: { format: npy, dtype: float32 }\nrecipes:\n  n: { augment: [ {center_crop: {size: 8}}, {normalize: {mean: [0.5, 0.5, 0.5], std: [0.25, 0.25, 0.25]}} ] }\n";
        let c = parse(yaml).expect("valid");
        assert_eq!(c.recipes[0].output.mean, [0.5; 3]);
        assert_eq!(c.recipes[0].output.dtype, Dtype::Float32);
        assert_eq!(c.output.mean, [0.0; 3], "the top-level output is not normalized by a recipe");
    }

    #[test]
    fn a_recipe_named_like_a_view_of_the_root_is_refused_by_name() {
        for name in ["encoded", "decoded", "augmented", "jobs", ".prepfs"] {
            let yaml = format!("recipes:\n  \"{name}\": {{ augment: [ {{center_crop: {{size: 8}}}} ] }}\n");
            let err = parse(&yaml).unwrap_err().to_string();
            assert!(err.contains(&format!("recipe `{name}` clashes")), "{name}: {err}");
        }
    }

    #[test]
    fn a_recipe_name_that_is_not_plain_is_refused() {
        for name in ["a/b", "", "-x", "sp ace", "..", "é"] {
            let yaml = format!("recipes:\n  \"{name}\": {{ augment: [ {{center_crop: {{size: 8}}}} ] }}\n");
            let err = parse(&yaml).unwrap_err().to_string();
            assert!(err.contains("is not a plain name"), "{name:?}: {err}");
        }
    }

    #[test]
    fn a_recipe_without_a_fixed_size_or_with_a_bad_op_is_refused_naming_the_recipe() {
        let err = parse("recipes:\n  e: { augment: [] }\n").unwrap_err().to_string();
        assert!(err.contains("recipe `e`") && err.contains("fixed size"), "{err}");
        let err = parse("recipes:\n  f:\n    augment:\n      - random_perspective: { p: 0.5 }\n").unwrap_err().to_string();
        assert!(err.contains("recipes.f.augment[0]") && err.contains("random_perspective") && err.contains("line 4"), "{err}");
        let err = parse("recipes:\n  g: { augment: [ {center_crop: {size: 8}}, {normalize: {mean: [0, 0, 0], std: [1, 1, 1]}} ] }\n").unwrap_err().to_string();
        assert!(err.contains("recipe `g`") && err.contains("needs `output: {format: npy, dtype: float32}`"), "{err}");
    }

    #[test]
    fn more_recipes_than_inodes_number_are_refused() {
        let mut yaml = String::from("recipes:\n");
        for i in 0..=super::MAX_RECIPES {
            yaml.push_str(&format!("  r{i}: {{ augment: [ {{center_crop: {{size: 8}}}} ] }}\n"));
        }
        let err = parse(&yaml).unwrap_err().to_string();
        assert!(err.contains("at most 15"), "{err}");
    }

    #[test]
    fn recipes_survive_the_yaml_writer() {
        let c = parse(TWO).expect("valid");
        let again = parse(&c.to_yaml()).expect("the written config parses");
        assert_eq!(again.recipes, c.recipes);
    }
}
