//! Where weights come from: memory-mapped safetensors files (single or sharded, as released)
//! or seeded random values (the built-in `demo` and `random:*` models). Both hand out
//! [`HostTensor`]s by name with a checked shape.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use rayon::prelude::*;
use safetensors::{Dtype, SafeTensors};

use crate::error::ModelError;

/// Element type of a tensor as it sits in host memory.
#[derive(Debug, Clone)]
pub enum HostData {
    F32(Vec<f32>),
    /// bf16 bit patterns.
    Bf16(Vec<u16>),
    /// IEEE half bit patterns.
    F16(Vec<u16>),
}

/// A tensor read from a [`WeightSource`].
#[derive(Debug, Clone)]
pub struct HostTensor {
    pub shape: Vec<usize>,
    pub data: HostData,
}

impl HostTensor {
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The values widened to f32 (exact for bf16 and f16).
    pub fn to_f32(&self) -> Vec<f32> {
        match &self.data {
            HostData::F32(v) => v.clone(),
            HostData::Bf16(v) => v
                .iter()
                .map(|&b| half::bf16::from_bits(b).to_f32())
                .collect(),
            HostData::F16(v) => v
                .iter()
                .map(|&b| half::f16::from_bits(b).to_f32())
                .collect(),
        }
    }

    /// The values as bf16 bit patterns (rounded to nearest even from f32/f16).
    pub fn to_bf16_bits(&self) -> Vec<u16> {
        match &self.data {
            HostData::Bf16(v) => v.clone(),
            HostData::F32(v) => v
                .iter()
                .map(|&x| half::bf16::from_f32(x).to_bits())
                .collect(),
            HostData::F16(v) => v
                .iter()
                .map(|&b| half::bf16::from_f32(half::f16::from_bits(b).to_f32()).to_bits())
                .collect(),
        }
    }
}

/// How a tensor is initialised when weights are random. Real checkpoints ignore it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Init {
    /// A weight with this fan-in: uniform with variance 1/fan_in.
    FanIn(usize),
    /// An embedding table: unit variance.
    Embedding,
    /// A norm weight: around 1.
    Norm,
    /// A bias: small.
    Bias,
    /// A per-channel scale (layer scale, ConvNeXt gamma): around this value.
    Scale(f32),
    /// Log-space SnakeBeta parameters: around 0.
    LogScale,
    /// Codebook usage counters: positive, between 0.5 and 2.
    Usage,
}

/// Element type that random weights are generated in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RandomDtype {
    Bf16,
    F32,
}

/// Seeded random weights, generated on demand from (seed, tensor name, element index), so
/// any backend can regenerate exactly the same values.
#[derive(Debug, Clone)]
pub struct RandomWeights {
    pub seed: u64,
    pub dtype: RandomDtype,
}

impl RandomWeights {
    fn generate(&self, name: &str, shape: &[usize], init: Init) -> HostTensor {
        let n: usize = shape.iter().product();
        let key = self.seed ^ fnv1a(name.as_bytes());
        let (center, half_width) = match init {
            Init::FanIn(fan_in) => (0.0, (3.0 / fan_in.max(1) as f32).sqrt()),
            Init::Embedding => (0.0, 3f32.sqrt()),
            Init::Norm => (1.0, 0.2),
            Init::Bias => (0.0, 0.1),
            Init::Scale(s) => (s, 0.5 * s.abs()),
            Init::LogScale => (0.0, 0.3),
            Init::Usage => (1.25, 0.75),
        };
        let value = |i: usize| center + half_width * (2.0 * unit_uniform(key, i as u64) - 1.0);
        let data = match self.dtype {
            RandomDtype::F32 => {
                let mut v = vec![0f32; n];
                v.par_chunks_mut(1 << 16)
                    .enumerate()
                    .for_each(|(c, chunk)| {
                        for (j, x) in chunk.iter_mut().enumerate() {
                            *x = value((c << 16) + j);
                        }
                    });
                HostData::F32(v)
            }
            RandomDtype::Bf16 => {
                let mut v = vec![0u16; n];
                v.par_chunks_mut(1 << 16)
                    .enumerate()
                    .for_each(|(c, chunk)| {
                        for (j, x) in chunk.iter_mut().enumerate() {
                            *x = half::bf16::from_f32(value((c << 16) + j)).to_bits();
                        }
                    });
                HostData::Bf16(v)
            }
        };
        HostTensor {
            shape: shape.to_vec(),
            data,
        }
    }
}

/// FNV-1a hash of a tensor name, mixed into the random seed.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// A uniform number in [0, 1) from a key and a counter (SplitMix64 finaliser).
fn unit_uniform(key: u64, i: u64) -> f32 {
    let mut z = key.wrapping_add(i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z >> 40) as f32 * (1.0 / (1u64 << 24) as f32)
}

struct TensorEntry {
    file: usize,
    dtype: Dtype,
    shape: Vec<usize>,
    start: usize,
    end: usize,
}

/// One or more memory-mapped safetensors files with a name index.
pub struct SafetensorsFiles {
    files: Vec<(PathBuf, Mmap)>,
    index: HashMap<String, TensorEntry>,
}

impl SafetensorsFiles {
    /// Opens `dir/<stem>.safetensors`, or the shards listed in
    /// `dir/<stem>.safetensors.index.json` when that exists.
    pub fn open(dir: &Path, stem: &str) -> Result<Self, ModelError> {
        let single = dir.join(format!("{stem}.safetensors"));
        let index_path = dir.join(format!("{stem}.safetensors.index.json"));
        let paths = if single.exists() {
            vec![single]
        } else if index_path.exists() {
            shard_paths(dir, &index_path)?
        } else {
            return Err(ModelError::Checkpoint {
                path: single,
                message: format!("not found (nor a sharded index {})", index_path.display()),
            });
        };
        Self::open_files(paths)
    }

    /// Opens the given files and indexes their tensors.
    pub fn open_files(paths: Vec<PathBuf>) -> Result<Self, ModelError> {
        let mut files = Vec::with_capacity(paths.len());
        let mut index = HashMap::new();
        for (fi, path) in paths.into_iter().enumerate() {
            let file = std::fs::File::open(&path).map_err(|source| ModelError::Io {
                path: path.clone(),
                source,
            })?;
            // SAFETY: the file is opened read-only and mapped privately; the checkpoint is not
            // expected to change while the server runs (as with every mmap-based loader).
            let mmap = unsafe { Mmap::map(&file) }.map_err(|source| ModelError::Io {
                path: path.clone(),
                source,
            })?;
            let (header_len, meta) =
                SafeTensors::read_metadata(&mmap).map_err(|e| ModelError::Checkpoint {
                    path: path.clone(),
                    message: format!("not a valid safetensors file: {e}"),
                })?;
            let base = 8 + header_len;
            for (name, info) in meta.tensors() {
                let (s, e) = info.data_offsets;
                if base + e > mmap.len() || s > e {
                    return Err(ModelError::Checkpoint {
                        path: path.clone(),
                        message: format!(
                            "tensor `{name}` lies outside the file (truncated download?)"
                        ),
                    });
                }
                index.insert(
                    name.clone(),
                    TensorEntry {
                        file: fi,
                        dtype: info.dtype,
                        shape: info.shape.clone(),
                        start: base + s,
                        end: base + e,
                    },
                );
            }
            files.push((path, mmap));
        }
        Ok(Self { files, index })
    }

    pub fn contains(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// The stored shape of `name`.
    pub fn shape(&self, name: &str) -> Option<&[usize]> {
        self.index.get(name).map(|e| e.shape.as_slice())
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.index.keys().map(|s| s.as_str())
    }

    fn describe(&self) -> String {
        self.files
            .iter()
            .map(|(p, _)| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Reads tensor `name`, checking that its shape is `shape`.
    pub fn tensor(&self, name: &str, shape: &[usize]) -> Result<HostTensor, ModelError> {
        let entry = self
            .index
            .get(name)
            .ok_or_else(|| ModelError::MissingTensor {
                name: name.to_string(),
                searched: self.describe(),
            })?;
        let (path, mmap) = &self.files[entry.file];
        if entry.shape != shape {
            return Err(ModelError::TensorShape {
                name: name.into(),
                path: path.clone(),
                actual: entry.shape.clone(),
                expected: shape.to_vec(),
            });
        }
        let bytes = &mmap[entry.start..entry.end];
        let data = match entry.dtype {
            Dtype::F32 => HostData::F32(
                bytes
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
            ),
            Dtype::BF16 => HostData::Bf16(
                bytes
                    .chunks_exact(2)
                    .map(|c| u16::from_le_bytes([c[0], c[1]]))
                    .collect(),
            ),
            Dtype::F16 => HostData::F16(
                bytes
                    .chunks_exact(2)
                    .map(|c| u16::from_le_bytes([c[0], c[1]]))
                    .collect(),
            ),
            other => {
                return Err(ModelError::TensorDtype {
                    name: name.into(),
                    path: path.clone(),
                    dtype: format!("{other:?}"),
                })
            }
        };
        let t = HostTensor {
            shape: shape.to_vec(),
            data,
        };
        if t.len() * dtype_size(entry.dtype) != bytes.len() {
            return Err(ModelError::Checkpoint {
                path: path.clone(),
                message: format!("tensor `{name}`: byte length does not match its shape"),
            });
        }
        Ok(t)
    }
}

fn dtype_size(d: Dtype) -> usize {
    match d {
        Dtype::F32 => 4,
        Dtype::BF16 | Dtype::F16 => 2,
        _ => 1,
    }
}

fn shard_paths(dir: &Path, index_path: &Path) -> Result<Vec<PathBuf>, ModelError> {
    let text = std::fs::read_to_string(index_path).map_err(|source| ModelError::Io {
        path: index_path.to_path_buf(),
        source,
    })?;
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| ModelError::Json {
        path: index_path.to_path_buf(),
        message: e.to_string(),
    })?;
    let map = value
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| ModelError::Config {
            path: index_path.to_path_buf(),
            field: "weight_map".into(),
            message: "missing or not an object".into(),
        })?;
    let mut names: Vec<String> = Vec::new();
    for (tensor, file) in map {
        let file = file.as_str().ok_or_else(|| ModelError::Config {
            path: index_path.to_path_buf(),
            field: format!("weight_map.{tensor}"),
            message: "not a file name".into(),
        })?;
        if file.contains('/') || file.contains("..") {
            return Err(ModelError::Config {
                path: index_path.to_path_buf(),
                field: format!("weight_map.{tensor}"),
                message: format!("`{file}` is not a plain file name"),
            });
        }
        if !names.iter().any(|n| n == file) {
            names.push(file.to_string());
        }
    }
    names.sort();
    Ok(names.into_iter().map(|n| dir.join(n)).collect())
}

/// Where a model's tensors come from.
pub enum WeightSource {
    Files(SafetensorsFiles),
    Random(RandomWeights),
}

impl WeightSource {
    /// Reads (or generates) tensor `name` with shape `shape`.
    pub fn tensor(
        &self,
        name: &str,
        shape: &[usize],
        init: Init,
    ) -> Result<HostTensor, ModelError> {
        match self {
            WeightSource::Files(f) => f.tensor(name, shape),
            WeightSource::Random(r) => Ok(r.generate(name, shape, init)),
        }
    }

    /// Whether the source holds `name` (random sources hold everything).
    pub fn contains(&self, name: &str) -> bool {
        match self {
            WeightSource::Files(f) => f.contains(name),
            WeightSource::Random(_) => true,
        }
    }

    pub fn is_random(&self) -> bool {
        matches!(self, WeightSource::Random(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_weights_are_deterministic_and_named() {
        let r = RandomWeights {
            seed: 7,
            dtype: RandomDtype::F32,
        };
        let a = r.generate("a.weight", &[4, 8], Init::FanIn(8)).to_f32();
        let b = r.generate("a.weight", &[4, 8], Init::FanIn(8)).to_f32();
        let c = r.generate("b.weight", &[4, 8], Init::FanIn(8)).to_f32();
        assert_eq!(a, b);
        assert_ne!(a, c);
        let bound = (3.0f32 / 8.0).sqrt();
        assert!(a.iter().all(|x| x.abs() <= bound));
    }

    #[test]
    fn random_bf16_matches_rounded_f32() {
        let f = RandomWeights {
            seed: 3,
            dtype: RandomDtype::F32,
        }
        .generate("x", &[100], Init::Norm)
        .to_f32();
        let b = RandomWeights {
            seed: 3,
            dtype: RandomDtype::Bf16,
        }
        .generate("x", &[100], Init::Norm)
        .to_f32();
        for (x, y) in f.iter().zip(&b) {
            assert_eq!(half::bf16::from_f32(*x).to_f32(), *y);
        }
    }
}
