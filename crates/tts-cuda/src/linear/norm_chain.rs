//! The one-row GEMV's norm chain (`gemv.cu`, `CudaOptions::chain_gemv`): a one-row GEMV
//! without activation whose next layer is a normed one-row GEMV (the talker step's O
//! projection before gate/up, its down projection before the next layer's QKV) also writes that layer's input with the norm's gains applied (g ⊙ y) and the
//! row's Σ y² in partials per row pair; the next layer then streams that input without
//! a norm of its own and scales its sums by 1 / rms. That takes the norm's gain loads and
//! squares out of the reader's product loop.

use super::{path_for, Act, GemmScratch, Linear, LinearPath, NextLinear, RowCall, Rows};
use crate::device::{Arg, Gpu};

/// Rows a norm-chain writer left for the next call: the rows it wrote (pointer, ld; one
/// row), their width and the norm (gain pointer, eps) it applied the gains of.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct NormRows {
    x: (u64, usize),
    k: usize,
    norm: (u64, f32),
}

impl NormRows {
    /// Whether a one-row call over `x` (width `k`, fused norm `norm`) may read these rows
    /// instead: the same rows, width and norm, and a norm at all.
    fn serves(&self, x: Rows, k: usize, norm: (u64, f32)) -> bool {
        x.count == 1
            && norm.0 != 0
            && *self
                == Self {
                    x: (x.ptr, x.ld),
                    k,
                    norm,
                }
    }
}

/// What one GEMV launch reads and writes of the chain (`gemv.cu`'s last five arguments).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct NormChain {
    /// Its input is the chain's rows: (`chain_x`, `chain_ss`), the norm from the partials.
    read: Option<(u64, u64)>,
    /// It writes the next layer's rows: (`chain_x`, that layer's gains, `chain_ss`).
    write: Option<(u64, u64, u64)>,
    /// What to record for the next call once the launch is enqueued.
    pub(super) record: Option<NormRows>,
}

impl NormChain {
    /// The chain for `c` over `l` on `gemv.cu`'s one-row body (never the staged GEMV:
    /// `body` false gives none): it reads what the call before left (`ready`), else it
    /// writes for `next` when that is a normed layer on the same body, the call has no
    /// activation and an even width (the writer's lanes store row pairs), and the rows fit
    /// the chain's buffers.
    pub(super) fn plan(
        gpu: &Gpu,
        scratch: &GemmScratch,
        l: &Linear,
        c: &RowCall,
        body: bool,
        ready: Option<NormRows>,
        next: Option<NextLinear>,
    ) -> Self {
        if !body || c.x.count != 1 || !scratch.paths.chain_gemv {
            return Self::default();
        }
        let bufs = (scratch.chain_x.ptr, scratch.chain_ss.ptr);
        if Self::reads(scratch, ready, c, l.k) {
            return Self {
                read: Some(bufs),
                ..Self::default()
            };
        }
        let out = Rows {
            ptr: c.y,
            ld: c.ldy,
            count: 1,
        };
        let write = next
            .filter(|_| c.act == Act::None && l.n.is_multiple_of(2) && l.n <= scratch.chain_x.len)
            .and_then(|nx| nx.norm.map(|g| (nx.n, g)))
            .filter(|&(n, _)| {
                path_for(&scratch.paths, out, n, l.n) == LinearPath::Gemv
                    && super::staged_gemv_plan(gpu, n, l.n, false).is_none()
            });
        Self {
            read: None,
            write: write.map(|(_, g)| (bufs.0, g.0, bufs.1)),
            record: write.map(|(_, g)| NormRows {
                x: (c.y, c.ldy),
                k: l.n,
                norm: g,
            }),
        }
    }

    /// Whether a call `c` over width `k` on `gemv.cu`'s one-row body reads the rows the
    /// call before left (`ready`) instead of norming its own input.
    pub(super) fn reads(
        scratch: &GemmScratch,
        ready: Option<NormRows>,
        c: &RowCall,
        k: usize,
    ) -> bool {
        c.x.count == 1
            && scratch.paths.chain_gemv
            && ready.is_some_and(|r| r.serves(c.x, k, c.norm))
    }

    /// Points the arguments (`row_kernel_args` order) of a GEMV over `k` columns at the
    /// chain's row when it reads it (no norm of its own: `k / 2` partials), and appends the
    /// chain's five arguments (zeros without a chain).
    pub(super) fn apply(&self, k: usize, args: &mut Vec<Arg>) {
        if let Some((x, _)) = self.read {
            args[3] = Arg::P(x);
            args[4] = Arg::I(k as i32);
            args[5] = Arg::P(0);
        }
        let (ss_in, ss_n) = self.read.map_or((0, 0), |(_, ss)| (ss, (k / 2) as i32));
        let (xo, xo_g, ss_out) = self.write.unwrap_or((0, 0, 0));
        args.extend([
            Arg::P(ss_in),
            Arg::I(ss_n),
            Arg::P(xo),
            Arg::P(xo_g),
            Arg::P(ss_out),
        ]);
    }
}

#[cfg(test)]
mod tests {
    use super::{NormRows, Rows};

    /// A writer's rows serve exactly the one-row call over the same rows, width and norm.
    #[test]
    fn chained_rows_serve_only_their_reader() {
        let rows = |ptr, count| Rows {
            ptr,
            ld: 2048,
            count,
        };
        let written = NormRows {
            x: (0x1000, 2048),
            k: 2048,
            norm: (0x2000, 1e-6),
        };
        assert!(written.serves(rows(0x1000, 1), 2048, (0x2000, 1e-6)));
        // other rows, more rows, another width, another or no norm
        assert!(!written.serves(rows(0x1400, 1), 2048, (0x2000, 1e-6)));
        assert!(!written.serves(rows(0x1000, 2), 2048, (0x2000, 1e-6)));
        assert!(!written.serves(rows(0x1000, 1), 1024, (0x2000, 1e-6)));
        assert!(!written.serves(rows(0x1000, 1), 2048, (0x3000, 1e-6)));
        assert!(!written.serves(rows(0x1000, 1), 2048, (0x2000, 1e-5)));
        assert!(!written.serves(rows(0x1000, 1), 2048, (0, 0.0)));
    }
}
