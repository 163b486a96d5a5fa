//! Which code-predictor steps run their attention with its neighbours in one launch
//! (`CudaOptions::fused_attention`, `QWEN3_TTS_FUSED_ATTENTION`).

/// The fused attention kernels a staged stage call over short caches may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FusedAttention {
    /// Steps of 1-4 rows: attention and the O projection in one launch (`attention_o.cu`).
    pub with_o: bool,
    /// One-row steps: the QKV projection, attention and the O projection in one launch
    /// (`qkv_attention_o.cu`), where the device runs it; the others as `with_o` says.
    pub with_qkv: bool,
}

/// Neither, until measured on the H200 (`docs/cuda-knobs.md`).
impl Default for FusedAttention {
    fn default() -> Self {
        Self {
            with_o: false,
            with_qkv: false,
        }
    }
}

impl std::str::FromStr for FusedAttention {
    type Err = String;

    /// `0` (neither), `o` (with the O projection; also `1`) or `qkv` (one-row steps with
    /// the QKV projection too, steps of 2-4 rows with the O projection).
    fn from_str(s: &str) -> Result<Self, String> {
        let (with_o, with_qkv) = match s.trim() {
            "0" | "off" | "none" => (false, false),
            "1" | "o" => (true, false),
            "qkv" => (true, true),
            other => return Err(format!("{other:?}: expected 0, o or qkv")),
        };
        Ok(Self { with_o, with_qkv })
    }
}

#[cfg(test)]
mod tests {
    use super::FusedAttention;

    /// Each choice of `QWEN3_TTS_FUSED_ATTENTION` parses; anything else is refused.
    #[test]
    fn choices_parse() {
        let parse = |s: &str| s.parse::<FusedAttention>();
        assert_eq!(parse("0"), Ok(FusedAttention::default()));
        let o = FusedAttention {
            with_o: true,
            with_qkv: false,
        };
        assert_eq!(parse("o"), Ok(o));
        assert_eq!(parse("1"), Ok(o));
        assert_eq!(
            parse(" qkv "),
            Ok(FusedAttention {
                with_o: true,
                with_qkv: true
            })
        );
        for bad in ["", "2", "qkvo", "on"] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
