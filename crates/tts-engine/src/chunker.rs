//! Chunk schedules: how many frames each codec call of a request decodes, and so how much
//! audio each chunk the client receives carries. The first chunk is small (time to first
//! audio); later ones grow (fewer, larger codec calls once the client has a buffer).

use crate::error::ConfigError;

/// Frames per chunk, chunk after chunk; the last entry repeats.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkSchedule {
    frames: Vec<usize>,
}

impl ChunkSchedule {
    /// A schedule from frames per chunk (each at least 1, at least one entry).
    pub fn new(frames: Vec<usize>) -> Result<Self, ConfigError> {
        if frames.is_empty() || frames.contains(&0) {
            return Err(ConfigError::Invalid(format!(
                "chunk schedule {frames:?}: needs at least one entry, each at least 1 frame"
            )));
        }
        Ok(Self { frames })
    }

    /// A schedule from trusted literals: zeros become 1, an empty list becomes `[1]`.
    pub(crate) fn clamped(frames: &[usize]) -> Self {
        let mut frames: Vec<usize> = frames.iter().map(|&f| f.max(1)).collect();
        if frames.is_empty() {
            frames.push(1);
        }
        Self { frames }
    }

    /// Frames in chunk `index` (0 = the first audio).
    pub fn frames(&self, index: usize) -> usize {
        let last = self.frames.len() - 1;
        self.frames[index.min(last)]
    }

    pub fn as_slice(&self) -> &[usize] {
        &self.frames
    }
}

impl std::str::FromStr for ChunkSchedule {
    type Err = ConfigError;
    /// Parses `1,2,4,8`.
    fn from_str(s: &str) -> Result<Self, ConfigError> {
        let frames = s
            .split(',')
            .map(|p| {
                p.trim()
                    .parse::<usize>()
                    .map_err(|_| ConfigError::Invalid(format!("chunk schedule `{s}`: `{p}`")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Self::new(frames)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_entry_repeats() {
        let s: ChunkSchedule = "1, 2,4,8".parse().unwrap();
        let got: Vec<usize> = (0..6).map(|i| s.frames(i)).collect();
        assert_eq!(got, vec![1, 2, 4, 8, 8, 8]);
    }

    #[test]
    fn empty_and_zero_entries_are_rejected() {
        assert!(ChunkSchedule::new(vec![]).is_err());
        assert!(ChunkSchedule::new(vec![1, 0]).is_err());
        assert!("1,x".parse::<ChunkSchedule>().is_err());
    }
}
