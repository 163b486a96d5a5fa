//! The emulation's sliding-window attention over each stream's KV ring.

use super::{Emu, Meta};
use crate::codec::plan::View;

impl Emu {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn attention(
        &mut self,
        meta: &Meta<'_>,
        w: &[f32],
        qkv: View,
        out: View,
        kv: usize,
        frames: usize,
    ) {
        let a = self.prog.attn;
        let (hd, half, kvd, ldq) = (
            a.head_dim,
            a.head_dim / 2,
            a.kv_heads * a.head_dim,
            a.ld_qkv,
        );
        let rep = a.heads / a.kv_heads;
        let q = self.read(qkv, frames * ldq);
        let rope = |x: &[f32], i: usize, pos: usize| {
            let j = if i < half { i } else { i - half };
            let ang = pos as f32 * w[a.inv_freq + j];
            let (c, s) = (ang.cos(), ang.sin());
            if i < half {
                x[i] * c - x[i + half] * s
            } else {
                x[i] * c + x[j] * s
            }
        };
        let mut o = vec![0f32; frames * a.ld_attn];
        // Blocks run in any order on the GPU: the last frames go first here, so a ring
        // write that aliased a key still to be read would show.
        for f in (0..frames).rev() {
            let row = meta.frame_row(f);
            if row < 0 {
                continue;
            }
            let row = row as usize;
            let (first, pos0) = (meta.first(row), meta.pos(row));
            let p = pos0 + f - first;
            let base = meta.slot(row) as usize * self.prog.state_stride + kv;
            let (kc, vc) = (base, base + a.ring * kvd);
            for h in 0..a.heads {
                let g = h / rep;
                let qrow = &q[f * ldq + h * hd..];
                let krow = &q[f * ldq + a.heads * hd + g * hd..];
                let qs: Vec<f32> = (0..hd).map(|i| rope(qrow, i, p)).collect();
                if h % rep == 0 {
                    for i in 0..hd {
                        let at = (p % a.ring) * kvd + g * hd + i;
                        self.state[kc + at] = rope(krow, i, p);
                        self.state[vc + at] = krow[kvd + i];
                    }
                }
                let lo = (p + 1).saturating_sub(a.window);
                let mut sc: Vec<f32> = (lo..=p)
                    .map(|kp| {
                        let d: f32 = if kp < pos0 {
                            let at = kc + (kp % a.ring) * kvd + g * hd;
                            (0..hd).map(|i| qs[i] * self.state[at + i]).sum()
                        } else {
                            let kr = &q[(first + kp - pos0) * ldq + a.heads * hd + g * hd..];
                            (0..hd).map(|i| qs[i] * rope(kr, i, kp)).sum()
                        };
                        d * a.scale
                    })
                    .collect();
                let m = sc.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let mut sum = 0f32;
                for s in sc.iter_mut() {
                    *s = (*s - m).exp();
                    sum += *s;
                }
                for i in 0..hd {
                    let mut acc = 0f32;
                    for (kk, s) in sc.iter().enumerate() {
                        let kp = lo + kk;
                        let v = if kp < pos0 {
                            self.state[vc + (kp % a.ring) * kvd + g * hd + i]
                        } else {
                            q[(first + kp - pos0) * ldq + a.heads * hd + kvd + g * hd + i]
                        };
                        acc += (s / sum) * v;
                    }
                    o[f * a.ld_attn + h * hd + i] = acc;
                }
            }
        }
        self.buf(out)[..frames * a.ld_attn].copy_from_slice(&o);
    }
}
