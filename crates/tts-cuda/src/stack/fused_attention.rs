//! Which steps run their attention with its neighbours in one launch
//! (`CudaOptions::fused_attention`, `QWEN3_TTS_FUSED_ATTENTION`).

/// The fused attention kernels a stage call may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FusedAttention {
    /// Code-predictor steps of 1-4 rows (staged stage calls over short caches): attention
    /// and the O projection in one launch (`attention_o.cu`).
    pub with_o: bool,
    /// One-row code-predictor steps: the QKV projection, attention and the O projection in
    /// one launch (`qkv_attention_o.cu`), where the device runs it; the others as `with_o`
    /// says.
    pub with_qkv: bool,
    /// One-row talker steps: the same over their long caches (`qkv_attention_o_long.cu`),
    /// where the device runs it.
    pub talker: bool,
}

/// None, until measured on the H200 (`docs/cuda-knobs.md`).
impl Default for FusedAttention {
    fn default() -> Self {
        Self {
            with_o: false,
            with_qkv: false,
            talker: false,
        }
    }
}

impl std::str::FromStr for FusedAttention {
    type Err = String;

    /// `0` (none), `o` (with the O projection; also `1`), `qkv` (one-row code-predictor
    /// steps with the QKV projection too, steps of 2-4 rows with the O projection),
    /// `talker` (one-row talker steps only) or `all` (`qkv` and `talker`).
    fn from_str(s: &str) -> Result<Self, String> {
        let (with_o, with_qkv, talker) = match s.trim() {
            "0" | "off" | "none" => (false, false, false),
            "1" | "o" => (true, false, false),
            "qkv" => (true, true, false),
            "talker" => (false, false, true),
            "all" => (true, true, true),
            other => return Err(format!("{other:?}: expected 0, o, qkv, talker or all")),
        };
        Ok(Self {
            with_o,
            with_qkv,
            talker,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::FusedAttention;

    /// Each choice of `QWEN3_TTS_FUSED_ATTENTION` parses; anything else is refused.
    #[test]
    fn choices_parse() {
        let parse = |s: &str| {
            s.parse::<FusedAttention>()
                .map(|f| (f.with_o, f.with_qkv, f.talker))
        };
        assert_eq!(parse("0"), Ok((false, false, false)));
        assert_eq!(parse("o"), Ok((true, false, false)));
        assert_eq!(parse("1"), Ok((true, false, false)));
        assert_eq!(parse(" qkv "), Ok((true, true, false)));
        assert_eq!(parse("talker"), Ok((false, false, true)));
        assert_eq!(parse("all"), Ok((true, true, true)));
        assert_eq!(FusedAttention::default(), "0".parse().unwrap());
        for bad in ["", "2", "qkvo", "on"] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
