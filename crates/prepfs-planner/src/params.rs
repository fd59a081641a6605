//! The models' inputs ([`PlanParams`], in the paper's symbols) and the parameter file
//! (`prepfs plan --params`): parsed with unknown keys refused, each value's range checked, and
//! every refusal ([`PlanError`]) naming its key and line.

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize};

pub use prepfs_base::yaml::Line;

/// The model's inputs, in the paper's symbols and SI units: bytes, bytes/s, samples/s.
///
/// Rates marked "per node" are one node's and are multiplied by `nodes`. A rate may be
/// `f64::INFINITY` (`.inf` in YAML) where that resource is not on the data path (for example
/// `b_nic` when the cache is in local memory), except `b_cache` and `b_storage`, which must be
/// finite so that every path has a finite rate.
///
/// Parsed from YAML with unknown keys refused; in a file, `m` may stand for both `s_decoded` and
/// `s_augmented` (as `m * s_data`), and `t_gpu` may be left out or null.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawPlanParams")]
pub struct PlanParams {
    /// Samples in the dataset.
    pub n_total: u64,
    /// Mean size of an encoded sample (the source file), bytes.
    pub s_data: f64,
    /// Mean size of a decoded sample (pixels), bytes. The paper's `M * s_data`.
    pub s_decoded: f64,
    /// Mean size of an augmented sample (what the consumer receives), bytes. The paper's
    /// `M * s_data`.
    pub s_augmented: f64,
    /// Cache capacity, bytes (0: no cache).
    pub s_cache: f64,
    /// Cache read bandwidth, bytes/s, aggregate (finite).
    pub b_cache: f64,
    /// NIC bandwidth between the cache/storage and a training node, bytes/s, per node.
    pub b_nic: f64,
    /// Host-to-accelerator (PCIe) bandwidth, bytes/s, per node.
    pub b_pcie: f64,
    /// Storage read bandwidth, bytes/s, aggregate (finite).
    pub b_storage: f64,
    /// Consumer (GPU training) rate, samples/s, per node; `None`: unbounded.
    pub t_gpu: Option<f64>,
    /// CPU decode + augment rate, samples/s, per node.
    pub t_da: f64,
    /// CPU augment-only rate (from decoded pixels), samples/s, per node.
    pub t_a: f64,
    /// Training nodes (homogeneous, data parallel).
    pub nodes: u32,
    /// NIC bandwidth taken by gradient synchronisation, bytes/s, per node (0 on one node).
    pub c_nw: f64,
    /// PCIe bandwidth taken by gradient synchronisation, bytes/s, per node (0 with NVLink).
    pub c_pcie: f64,
    /// prepfs's model only: the rate the mount serves a cached output at, FUSE round trips and
    /// the readers' own work included, samples/s, per node, on all its cores; `None`: not
    /// measured (the model then takes [`super::prepfs::DEFAULT_SERVE_PER_CORE`] per core).
    pub t_serve: Option<f64>,
    /// prepfs's model only: the training jobs that share each augmented output (1: one job).
    pub jobs: u32,
    /// prepfs's model only: where recipes split the jobs between pipelines, the jobs one
    /// augmented output may serve (the jobs reading its pipeline, averaged over the pipelines
    /// by their reads); the decoded pixels and encoded bytes still serve all `jobs`. `None`:
    /// every job reads the same pipeline (`jobs`).
    pub output_jobs: Option<f64>,
    /// prepfs's model only: the cores the CPU rates (`t_da`, `t_a`, `t_serve`) were measured
    /// on, for the default serve rate.
    pub cores: u32,
    /// prepfs's model only: the directories (classes) the samples are in. A job's substitute
    /// comes from the requested file's directory, so what one job's miss made waits in the
    /// cache until the other jobs' requests reach that directory (1: one directory).
    pub dirs: u32,
    /// prepfs's model only: bytes the remote tier shared by the nodes holds (0: none). A
    /// sample missing from a node's memory is read from it, across that node's NIC, where it
    /// holds the sample, before the storage.
    pub s_remote: f64,
    /// prepfs's model only: the mean bytes of a sample in the remote tier (encoded bytes or
    /// decoded pixels, as the mounts wrote it).
    pub s_remote_entry: f64,
    /// prepfs's model only: the share of the remote tier's samples held as decoded pixels
    /// (only an augment left to do); the rest are encoded bytes (a decode and an augment).
    pub remote_decoded: f64,
    /// prepfs's model only: seconds a read from the remote tier takes (its round trip and the
    /// transfer), charged to the node's time per sample read from it.
    pub t_remote: f64,
    /// prepfs's model only: core-seconds a read from the storage costs the node's CPU (the
    /// system call, the copy, the buffer's pages; 0: free, as behind a slow link).
    pub t_read: f64,
    /// prepfs's model only, several jobs: core-seconds an augmented output made costs beyond
    /// its pixel work and any source read (writing it into the cache, the round trips of the
    /// miss that made it; 0: not measured). The serving probe's fit measures a miss's cost, and
    /// only the read's own CPU (`t_read`) is saved by a form that spares the read.
    pub t_output: f64,
}


/// A refused parameter file or split.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The parameter file could not be read.
    #[error("cannot read {}: {source}", prepfs_base::escape::escaped(path))]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// Something in a parameter file was refused.
    #[error("{}: {source}", prepfs_base::escape::escaped(path))]
    InFile {
        path: PathBuf,
        #[source]
        source: Box<PlanError>,
    },
    /// Not YAML, an unknown key, or a value of the wrong type; serde_norway's message names the
    /// key and the line.
    #[error("{0}")]
    Yaml(String),
    /// A required key is absent.
    #[error("missing key `{key}`{hint}")]
    Missing { key: &'static str, hint: &'static str },
    /// A required key is present but null.
    #[error("`{key}`{line}: null, but a value is needed")]
    Null { key: &'static str, line: Line },
    /// `m` given together with an explicit size it stands for.
    #[error(
        "`m` and `{key}`{line} both given: `m` stands for both `s_decoded` and `s_augmented` \
         (as m * s_data); give `m` or the two sizes"
    )]
    Conflict { key: &'static str, line: Line },
    /// A value out of its range.
    #[error("`{key}`{line}: {reason}")]
    Invalid { key: &'static str, line: Line, reason: String },
    /// A split that is not `E-D-A` in whole percent summing to 100.
    #[error("bad split `{input}`: {reason} (expected E-D-A: three whole percentages for encoded, decoded and augmented that sum to 100, e.g. 20-30-50)")]
    Split { input: String, reason: String },
}

impl PlanParams {
    /// Checks every value's range (see the field docs), naming the key's line of `text`.
    fn validate_in(&self, text: &str) -> Result<(), PlanError> {
        let invalid = |key: &'static str, reason: String| PlanError::Invalid {
            key,
            line: Line::of(text, key),
            reason,
        };
        if self.n_total == 0 {
            return Err(invalid("n_total", "must be at least 1".into()));
        }
        if self.nodes == 0 {
            return Err(invalid("nodes", "must be at least 1".into()));
        }
        for (key, v) in [
            ("s_data", self.s_data),
            ("s_decoded", self.s_decoded),
            ("s_augmented", self.s_augmented),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(invalid(key, format!("must be a positive number of bytes, got {v}")));
            }
        }
        if !(self.s_cache.is_finite() && self.s_cache >= 0.0) {
            return Err(invalid(
                "s_cache",
                format!("must be a number of bytes, 0 or more, got {}", self.s_cache),
            ));
        }
        for (key, v) in [("b_cache", self.b_cache), ("b_storage", self.b_storage)] {
            if !(v.is_finite() && v > 0.0) {
                return Err(invalid(
                    key,
                    format!("must be a positive, finite rate in bytes/s, got {v}"),
                ));
            }
        }
        let rates = [
            ("b_nic", self.b_nic),
            ("b_pcie", self.b_pcie),
            ("t_da", self.t_da),
            ("t_a", self.t_a),
        ];
        let optional = self.t_gpu.map(|t| ("t_gpu", t)).into_iter().chain(self.t_serve.map(|t| ("t_serve", t)));
        for (key, v) in rates.into_iter().chain(optional) {
            if v.is_nan() || v <= 0.0 {
                return Err(invalid(
                    key,
                    format!("must be a positive rate (or .inf for no limit), got {v}"),
                ));
            }
        }
        if !(self.s_remote.is_finite() && self.s_remote >= 0.0) {
            return Err(invalid("s_remote", format!("must be a number of bytes, 0 or more, got {}", self.s_remote)));
        }
        if !(self.s_remote_entry.is_finite() && self.s_remote_entry > 0.0) {
            return Err(invalid("s_remote_entry", format!("must be a positive number of bytes, got {}", self.s_remote_entry)));
        }
        if !(self.t_remote.is_finite() && self.t_remote >= 0.0) {
            return Err(invalid("t_remote", format!("must be a number of seconds, 0 or more, got {}", self.t_remote)));
        }
        for (key, t) in [("t_read", self.t_read), ("t_output", self.t_output)] {
            if !(t.is_finite() && t >= 0.0) {
                return Err(invalid(key, format!("must be a number of seconds, 0 or more, got {t}")));
            }
        }
        if !(0.0..=1.0).contains(&self.remote_decoded) {
            return Err(invalid("remote_decoded", format!("must be a share from 0 to 1, got {}", self.remote_decoded)));
        }
        for (key, c, link, b) in [
            ("c_nw", self.c_nw, "b_nic", self.b_nic),
            ("c_pcie", self.c_pcie, "b_pcie", self.b_pcie),
        ] {
            if !(c.is_finite() && c >= 0.0) {
                return Err(invalid(key, format!("must be a rate in bytes/s, 0 or more, got {c}")));
            }
            if c >= b {
                return Err(invalid(
                    key,
                    format!("{c} leaves nothing of `{link}` ({b}) for samples"),
                ));
            }
        }
        Ok(())
    }
}

/// The parameter file as written: every key optional here so that a missing one is reported by
/// name, and null told apart from absent.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPlanParams {
    #[serde(default, deserialize_with = "present")]
    n_total: Option<Option<u64>>,
    #[serde(default, deserialize_with = "present")]
    s_data: Option<Option<f64>>,
    #[serde(default, deserialize_with = "present")]
    s_decoded: Option<Option<f64>>,
    #[serde(default, deserialize_with = "present")]
    s_augmented: Option<Option<f64>>,
    #[serde(default, deserialize_with = "present")]
    m: Option<Option<f64>>,
    #[serde(default, deserialize_with = "present")]
    s_cache: Option<Option<f64>>,
    #[serde(default, deserialize_with = "present")]
    b_cache: Option<Option<f64>>,
    #[serde(default, deserialize_with = "present")]
    b_nic: Option<Option<f64>>,
    #[serde(default, deserialize_with = "present")]
    b_pcie: Option<Option<f64>>,
    #[serde(default, deserialize_with = "present")]
    b_storage: Option<Option<f64>>,
    #[serde(default)]
    t_gpu: Option<f64>,
    #[serde(default, deserialize_with = "present")]
    t_da: Option<Option<f64>>,
    #[serde(default, deserialize_with = "present")]
    t_a: Option<Option<f64>>,
    #[serde(default, deserialize_with = "present")]
    nodes: Option<Option<u32>>,
    #[serde(default, deserialize_with = "present")]
    c_nw: Option<Option<f64>>,
    #[serde(default, deserialize_with = "present")]
    c_pcie: Option<Option<f64>>,
    #[serde(default)]
    t_serve: Option<f64>,
    #[serde(default)]
    jobs: Option<u32>,
    #[serde(default)]
    output_jobs: Option<f64>,
    #[serde(default)]
    cores: Option<u32>,
    #[serde(default)]
    dirs: Option<u32>,
    #[serde(default)]
    s_remote: Option<f64>,
    #[serde(default)]
    s_remote_entry: Option<f64>,
    #[serde(default)]
    remote_decoded: Option<f64>,
    #[serde(default)]
    t_remote: Option<f64>,
    #[serde(default)]
    t_read: Option<f64>,
    #[serde(default)]
    t_output: Option<f64>,
}

/// A key that is present deserialises to `Some(value or None for null)`; `#[serde(default)]`
/// makes an absent one `None`.
fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

impl RawPlanParams {
    fn resolve(self, text: &str) -> Result<PlanParams, PlanError> {
        fn need<T>(text: &str, key: &'static str, v: Option<Option<T>>) -> Result<T, PlanError> {
            match v {
                Some(Some(v)) => Ok(v),
                Some(None) => Err(PlanError::Null { key, line: Line::of(text, key) }),
                None => Err(PlanError::Missing { key, hint: "" }),
            }
        }
        let s_data = need(text, "s_data", self.s_data)?;
        let (s_decoded, s_augmented) = match self.m {
            Some(m) => {
                for (key, given) in [
                    ("s_decoded", self.s_decoded.is_some()),
                    ("s_augmented", self.s_augmented.is_some()),
                ] {
                    if given {
                        return Err(PlanError::Conflict {
                            key,
                            line: Line::of(text, key),
                        });
                    }
                }
                let m =
                    m.ok_or(PlanError::Null { key: "m", line: Line::of(text, "m") })?;
                if !(m.is_finite() && m > 0.0) {
                    return Err(PlanError::Invalid {
                        key: "m",
                        line: Line::of(text, "m"),
                        reason: format!("must be a positive factor, got {m}"),
                    });
                }
                (m * s_data, m * s_data)
            }
            None => {
                const HINT: &str =
                    " (or give `m`: decoded and augmented samples are then m * s_data bytes)";
                let size = |key: &'static str, v: Option<Option<f64>>| match v {
                    None => Err(PlanError::Missing { key, hint: HINT }),
                    v => need(text, key, v),
                };
                (size("s_decoded", self.s_decoded)?, size("s_augmented", self.s_augmented)?)
            }
        };
        let params = PlanParams {
            n_total: need(text, "n_total", self.n_total)?,
            s_data,
            s_decoded,
            s_augmented,
            s_cache: need(text, "s_cache", self.s_cache)?,
            b_cache: need(text, "b_cache", self.b_cache)?,
            b_nic: need(text, "b_nic", self.b_nic)?,
            b_pcie: need(text, "b_pcie", self.b_pcie)?,
            b_storage: need(text, "b_storage", self.b_storage)?,
            t_gpu: self.t_gpu.filter(|t| *t != f64::INFINITY),
            t_da: need(text, "t_da", self.t_da)?,
            t_a: need(text, "t_a", self.t_a)?,
            nodes: need(text, "nodes", self.nodes)?,
            c_nw: need(text, "c_nw", self.c_nw)?,
            c_pcie: need(text, "c_pcie", self.c_pcie)?,
            t_serve: self.t_serve.filter(|t| *t != f64::INFINITY),
            jobs: self.jobs.unwrap_or(1).max(1),
            output_jobs: self.output_jobs.filter(|j| j.is_finite() && *j >= 1.0),
            cores: self.cores.unwrap_or(1).max(1),
            dirs: self.dirs.unwrap_or(1).max(1),
            s_remote: self.s_remote.unwrap_or(0.0),
            s_remote_entry: self.s_remote_entry.unwrap_or(s_data),
            remote_decoded: self.remote_decoded.unwrap_or(0.0),
            t_remote: self.t_remote.unwrap_or(0.0),
            t_read: self.t_read.unwrap_or(0.0),
            t_output: self.t_output.unwrap_or(0.0),
        };
        params.validate_in(text)?;
        Ok(params)
    }
}

impl TryFrom<RawPlanParams> for PlanParams {
    type Error = PlanError;

    fn try_from(raw: RawPlanParams) -> Result<PlanParams, PlanError> {
        raw.resolve("")
    }
}

/// Parses and validates a parameter file's text.
pub(crate) fn parse_params(text: &str) -> Result<PlanParams, PlanError> {
    let text_or_empty_map = if text.trim().is_empty() { "{}" } else { text };
    let raw: RawPlanParams =
        serde_norway::from_str(text_or_empty_map).map_err(|e| PlanError::Yaml(prepfs_base::yaml::describe_error(&e)))?;
    raw.resolve(text)
}

/// Reads, parses and validates a parameter file (YAML).
pub fn load_params(path: impl AsRef<Path>) -> Result<PlanParams, PlanError> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path)
        .map_err(|source| PlanError::Read { path: path.to_path_buf(), source })?;
    parse_params(&text)
        .map_err(|e| PlanError::InFile { path: path.to_path_buf(), source: Box::new(e) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seneca::tests::{base, split, BASE_YAML};
    use crate::seneca::{best_split, evaluate};

    #[test]
    fn a_full_file_parses() {
        let p = parse_params(BASE_YAML).expect("valid");
        assert_eq!(p, base());
    }

    #[test]
    fn t_gpu_may_be_absent_null_or_infinite() {
        for yaml in [
            BASE_YAML.replace("t_gpu: null\n", ""),
            BASE_YAML.replace("t_gpu: null", "t_gpu: .inf"),
            BASE_YAML.to_string(),
        ] {
            assert_eq!(parse_params(&yaml).expect("valid").t_gpu, None);
        }
        let p = parse_params(&BASE_YAML.replace("t_gpu: null", "t_gpu: 1500")).expect("valid");
        assert_eq!(p.t_gpu, Some(1500.0));
    }

    #[test]
    fn unknown_keys_are_refused_by_name_and_line() {
        let err = parse_params(&BASE_YAML.replace("c_pcie: 0", "c_pcie: 0\nb_nicc: 5"))
            .expect_err("unknown");
        let msg = err.to_string();
        assert!(matches!(err, PlanError::Yaml(_)));
        assert!(msg.contains("b_nicc") && msg.contains("line 16"), "{msg}");
    }

    #[test]
    fn missing_keys_are_refused_by_name() {
        for key in [
            "n_total",
            "s_data",
            "s_cache",
            "b_cache",
            "b_nic",
            "b_pcie",
            "b_storage",
            "t_da",
            "t_a",
            "nodes",
            "c_nw",
            "c_pcie",
        ] {
            let yaml: String = BASE_YAML
                .lines()
                .filter(|l| !l.starts_with(&format!("{key}:")))
                .map(|l| format!("{l}\n"))
                .collect();
            let msg = parse_params(&yaml).expect_err(key).to_string();
            assert_eq!(msg, format!("missing key `{key}`"));
        }
        let msg = parse_params(&BASE_YAML.replace("s_augmented: 250\n", ""))
            .expect_err("no size")
            .to_string();
        assert!(msg.starts_with("missing key `s_augmented`") && msg.contains("`m`"), "{msg}");
        let msg = parse_params("").expect_err("empty").to_string();
        assert!(msg.starts_with("missing key `"), "{msg}");
    }

    #[test]
    fn null_values_are_refused_by_name_and_line() {
        let msg = parse_params(&BASE_YAML.replace("b_nic: .inf", "b_nic: null"))
            .expect_err("null")
            .to_string();
        assert_eq!(msg, "`b_nic` (line 7): null, but a value is needed");
        let msg = parse_params(&BASE_YAML.replace("b_nic: .inf", "b_nic:"))
            .expect_err("null")
            .to_string();
        assert!(msg.contains("`b_nic` (line 7)"), "{msg}");
    }

    #[test]
    fn m_and_an_explicit_size_together_are_refused() {
        let err =
            parse_params(&BASE_YAML.replace("s_augmented: 250\n", "m: 3\n")).expect_err("both");
        let msg = err.to_string();
        assert!(matches!(err, PlanError::Conflict { key: "s_decoded", .. }), "{msg}");
        assert!(msg.contains("`m` and `s_decoded` (line 3)"), "{msg}");
        let yaml = BASE_YAML.replace("s_decoded: 500\n", "m: 3\n");
        assert!(matches!(parse_params(&yaml), Err(PlanError::Conflict { key: "s_augmented", .. })));
    }

    #[test]
    fn wrong_types_and_bad_values_name_the_key_and_line() {
        let msg = parse_params(&BASE_YAML.replace("b_cache: 1.0e9", "b_cache: 8GB/s"))
            .expect_err("type")
            .to_string();
        assert!(msg.contains("b_cache") && msg.contains("line 6"), "{msg}");
        let msg = parse_params(&BASE_YAML.replace("nodes: 1", "nodes: 1.5"))
            .expect_err("type")
            .to_string();
        assert!(msg.contains("nodes") && msg.contains("line 13"), "{msg}");
        for (from, to, key, line) in [
            ("s_data: 100", "s_data: -1", "s_data", 2),
            ("s_decoded: 500", "s_decoded: 0", "s_decoded", 3),
            ("s_cache: 0", "s_cache: -5", "s_cache", 5),
            ("b_cache: 1.0e9", "b_cache: .inf", "b_cache", 6),
            ("b_storage: 1.0e6", "b_storage: 0", "b_storage", 9),
            ("t_gpu: null", "t_gpu: 0", "t_gpu", 10),
            ("t_da: 1000", "t_da: .nan", "t_da", 11),
            ("n_total: 1000", "n_total: 0", "n_total", 1),
            ("nodes: 1", "nodes: 0", "nodes", 13),
            ("c_nw: 0", "c_nw: -1", "c_nw", 14),
        ] {
            let msg = parse_params(&BASE_YAML.replace(from, to)).expect_err(to).to_string();
            assert!(msg.starts_with(&format!("`{key}` (line {line}): ")), "{to}: {msg}");
        }
        let yaml =
            BASE_YAML.replace("b_pcie: .inf", "b_pcie: 1e6").replace("c_pcie: 0", "c_pcie: 1e6");
        let msg = parse_params(&yaml).expect_err("c >= b").to_string();
        assert!(msg.contains("`c_pcie` (line 15)") && msg.contains("b_pcie"), "{msg}");
        let msg = parse_params(&BASE_YAML.replace("s_decoded: 500\ns_augmented: 250", "m: -2"))
            .expect_err("m")
            .to_string();
        assert!(msg.starts_with("`m` (line 3): "), "{msg}");
    }

    #[test]
    fn load_params_names_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("params.yaml");
        std::fs::write(&path, BASE_YAML).expect("write");
        assert_eq!(load_params(&path).expect("valid"), base());
        std::fs::write(&path, BASE_YAML.replace("t_a: 5000\n", "")).expect("write");
        let msg = load_params(&path).expect_err("missing").to_string();
        assert_eq!(msg, format!("{}: missing key `t_a`", path.display()));
        let msg = load_params(dir.path().join("absent.yaml")).expect_err("absent").to_string();
        assert!(msg.starts_with("cannot read ") && msg.contains("absent.yaml"), "{msg}");
    }

    #[test]
    fn params_deserialise_through_serde_too() {
        let p: PlanParams = serde_norway::from_str(BASE_YAML).expect("valid");
        assert_eq!(p, base());
        let err = serde_norway::from_str::<PlanParams>(&BASE_YAML.replace("t_a: 5000\n", ""))
            .expect_err("missing");
        assert!(err.to_string().contains("missing key `t_a`"), "{err}");
    }

    #[test]
    fn the_example_file_is_valid() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../mount-configs/plan-example.yaml");
        let p = load_params(&path).expect("the example parses");
        assert_eq!(p.n_total, 1_281_167);
        let (_, ev) = best_split(&p);
        for s in ["100-0-0", "0-100-0", "0-0-100"] {
            assert!(ev.samples_per_s >= evaluate(&p, split(s)).samples_per_s);
        }
    }
}
