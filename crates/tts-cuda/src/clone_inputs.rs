//! Prompt positions whose codec input is not an id: a cloned voice's speaker vector and an
//! in-context reference frame (`CodecInput::Speaker`, `CodecInput::Frame`). Their vectors
//! are made on the host, for Base models only, from host copies of the codec embedding
//! tables (the sums of a frame's 16 code embeddings in f32, as the CPU reference and the
//! step's `frame_embedding` kernel add them), then added to the prefill's input rows on the
//! device (`talker::prefill_with_extra`).

use half::bf16;
use tts_model::checkpoint::Init;
use tts_model::config::{ModelKind, NUM_CODE_GROUPS};
use tts_model::prompt::{CodecInput, Prompt};
use tts_model::{Model, ModelError};

/// Host copies of the talker's codec embedding and the code predictor's 15 tables.
pub struct CloneInputs {
    hidden: usize,
    codec_vocab: usize,
    cp_vocab: usize,
    /// `[codec_vocab, hidden]`, bf16 bits.
    codec: Vec<u16>,
    /// `[15, cp_vocab, hidden]`, bf16 bits.
    cp: Vec<u16>,
}

impl CloneInputs {
    /// The tables of a Base model; `None` for the other kinds (their prompts hold ids only).
    pub fn load(model: &Model) -> Result<Option<Self>, ModelError> {
        if model.kind() != ModelKind::Base {
            return Ok(None);
        }
        let t = &model.config.talker;
        let hidden = t.hidden_size;
        let cp_vocab = t.code_predictor.vocab_size;
        let codec = model
            .weights
            .tensor(
                "talker.model.codec_embedding.weight",
                &[t.vocab_size, hidden],
                Init::Embedding,
            )?
            .to_bf16_bits();
        let mut cp = Vec::with_capacity((NUM_CODE_GROUPS - 1) * cp_vocab * hidden);
        for j in 0..NUM_CODE_GROUPS - 1 {
            let name = format!("talker.code_predictor.model.codec_embedding.{j}.weight");
            let w = model
                .weights
                .tensor(&name, &[cp_vocab, hidden], Init::Embedding)?;
            cp.extend(w.to_bf16_bits());
        }
        Ok(Some(Self {
            hidden,
            codec_vocab: t.vocab_size,
            cp_vocab,
            codec,
            cp,
        }))
    }

    fn row(table: &[u16], hidden: usize, i: usize) -> impl Iterator<Item = f32> + '_ {
        table[i * hidden..(i + 1) * hidden]
            .iter()
            .map(|&b| bf16::from_bits(b).to_f32())
    }

    /// The codec-track vector of `input` in `prompt`, for the inputs that are not ids;
    /// `Ok(None)` for an id. An error says what is out of range.
    pub fn vector(&self, prompt: &Prompt, input: CodecInput) -> Result<Option<Vec<f32>>, String> {
        let h = self.hidden;
        match input {
            CodecInput::Id(_) => Ok(None),
            CodecInput::Speaker(key) => Ok(Some(prompt.speaker_values(key, h)?.to_vec())),
            CodecInput::Frame(f) => {
                if f[0] as usize >= self.codec_vocab
                    || f[1..].iter().any(|&c| c as usize >= self.cp_vocab)
                {
                    return Err("a reference frame's code is out of range".into());
                }
                let mut v: Vec<f32> = Self::row(&self.codec, h, f[0] as usize).collect();
                for (j, &code) in f[1..].iter().enumerate() {
                    let row = j * self.cp_vocab + code as usize;
                    for (a, b) in v.iter_mut().zip(Self::row(&self.cp, h, row)) {
                        *a += b;
                    }
                }
                Ok(Some(v))
            }
        }
    }
}

/// The extra input rows of one prefill pass: a table of vectors and, per token, the row of
/// the table added to its input (-1: none).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExtraRows {
    pub table: Vec<f32>,
    pub ids: Vec<i32>,
}

impl ExtraRows {
    /// The rows of jobs whose extras are `(token index within the job, vector)`, for a pass
    /// of their tokens one after another (`tokens[i]` tokens for job `i`).
    pub fn for_pass<'a>(jobs: impl IntoIterator<Item = (usize, &'a [(usize, Vec<f32>)])>) -> Self {
        let mut out = Self::default();
        for (tokens, extra) in jobs {
            let base = out.ids.len();
            out.ids.resize(base + tokens, -1);
            for (i, v) in extra {
                out.ids[base + i] = (out.table.len() / v.len().max(1)) as i32;
                out.table.extend_from_slice(v);
            }
        }
        out
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extra_rows_index_their_table_by_token() {
        let a = [(1usize, vec![1.0, 2.0]), (2, vec![3.0, 4.0])];
        let b: [(usize, Vec<f32>); 0] = [];
        let c = [(0usize, vec![5.0, 6.0])];
        let rows = ExtraRows::for_pass([(3, &a[..]), (2, &b[..]), (1, &c[..])]);
        assert_eq!(rows.ids, vec![-1, 0, 1, -1, -1, 2]);
        assert_eq!(rows.table, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert!(ExtraRows::for_pass([(4, &b[..])]).is_empty());
    }
}
