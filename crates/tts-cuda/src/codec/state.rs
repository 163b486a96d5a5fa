//! Per-slot stream state of the GPU codec and the per-pass inputs that address it.
//!
//! On the device every slot owns one contiguous region of `slot_stride` floats: for each
//! causal layer two copies of its input history (a pass reads copy `parity`, writes the
//! updated history into the other), and per transformer layer a KV ring indexed by
//! absolute position modulo `ring`. On the host each slot has its frame counter (the next
//! absolute position) and its parity. A decode call is split into passes of at most
//! `frames_cap` frames with each slot at most once per pass; the pass's metadata (see
//! `kernels/codec.cu`) and codes go to the device in one copy.

use tts_model::Frame;

/// Bump allocator of the per-slot state region (offsets in floats, 32-float aligned).
#[derive(Debug, Default, Clone)]
pub struct StateLayout {
    pub stride: usize,
}

impl StateLayout {
    pub fn alloc(&mut self, n: usize) -> usize {
        let at = self.stride.next_multiple_of(32);
        self.stride = at + n;
        at
    }

    /// Final per-slot stride (rounded so every slot starts 128-byte aligned).
    pub fn finish(&self) -> usize {
        self.stride.next_multiple_of(32).max(32)
    }
}

/// Host view of the slots: position (frames decoded) and history parity.
#[derive(Debug, Clone)]
pub struct SlotBook {
    pub frames: Vec<usize>,
    pub parity: Vec<u8>,
}

impl SlotBook {
    pub fn new(slots: usize) -> Self {
        Self {
            frames: vec![0; slots],
            parity: vec![0; slots],
        }
    }

    pub fn reset(&mut self, slot: usize) {
        self.frames[slot] = 0;
        self.parity[slot] = 0;
    }
}

/// Offsets (in i32) of the pass inputs: `R` = row capacity, `F` = frame capacity.
#[derive(Debug, Clone, Copy)]
pub struct InputLayout {
    pub rows: usize,
    pub frames: usize,
    pub nq: usize,
}

impl InputLayout {
    /// Metadata block: 5 row arrays then `frame_row` (see `CodecMeta` in codec.cu).
    pub fn meta(&self) -> usize {
        0
    }

    /// `frame_row[f]`.
    pub fn frame_row(&self) -> usize {
        5 * self.rows
    }

    /// Codes `[F][nq]`.
    pub fn codes(&self) -> usize {
        5 * self.rows + self.frames
    }

    pub fn total(&self) -> usize {
        self.codes() + self.frames * self.nq
    }
}

/// One row of a pass: `frames` frames of call row `row` starting at its frame `start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    pub row: usize,
    pub slot: usize,
    pub start: usize,
    pub frames: usize,
}

/// Splits call rows (`(slot, frame count)`) into passes: each pass holds at most
/// `frames_cap` frames, each row at most once and at most `piece_cap` of its frames, and
/// a row's pieces stay in order across passes.
pub fn plan_passes(
    rows: &[(usize, usize)],
    frames_cap: usize,
    piece_cap: usize,
) -> Vec<Vec<Piece>> {
    let mut done = vec![0usize; rows.len()];
    let mut passes = Vec::new();
    let (fc, pc) = (frames_cap.max(1), piece_cap.max(1));
    loop {
        let mut pass = Vec::new();
        let mut total = 0;
        for (r, &(slot, n)) in rows.iter().enumerate() {
            let take = (n - done[r]).min(pc).min(fc - total);
            if take == 0 {
                continue;
            }
            pass.push(Piece {
                row: r,
                slot,
                start: done[r],
                frames: take,
            });
            done[r] += take;
            total += take;
            if total == fc {
                break;
            }
        }
        if pass.is_empty() {
            return passes;
        }
        passes.push(pass);
    }
}

/// The pass inputs as one i32 vector (`layout.total()` long, zero-padded), for `pieces`
/// whose codes are `codes(piece)`, reading positions/parities from `book`.
pub fn pass_inputs<'a>(
    layout: &InputLayout,
    pieces: &[Piece],
    book: &SlotBook,
    codes: impl Fn(&Piece) -> &'a [Frame],
) -> Vec<i32> {
    let r = layout.rows;
    let mut v = vec![0i32; layout.total()];
    v[..r].fill(-1);
    v[layout.frame_row()..layout.codes()].fill(-1);
    let mut first = 0usize;
    for (i, p) in pieces.iter().enumerate() {
        v[i] = p.slot as i32;
        v[r + i] = book.parity[p.slot] as i32;
        v[2 * r + i] = first as i32;
        v[3 * r + i] = p.frames as i32;
        v[4 * r + i] = book.frames[p.slot] as i32;
        for (f, frame) in codes(p).iter().enumerate() {
            v[layout.frame_row() + first + f] = i as i32;
            let at = layout.codes() + (first + f) * layout.nq;
            for (dst, &c) in v[at..at + layout.nq].iter_mut().zip(frame.iter()) {
                *dst = c as i32;
            }
        }
        first += p.frames;
    }
    v
}

/// After a pass: every slot in it advanced by its frames and flipped its parity.
pub fn advance(book: &mut SlotBook, pieces: &[Piece]) {
    for p in pieces {
        book.frames[p.slot] += p.frames;
        book.parity[p.slot] ^= 1;
    }
}

/// Frames per row of a one-pass call of `frames` frames in all: `piece_cap` a row, the
/// rest in the last row (the warm-up's calls, one per frame count).
pub fn rows_of_one_pass(frames: usize, piece_cap: usize) -> Vec<usize> {
    let pc = piece_cap.max(1);
    (0..frames.div_ceil(pc))
        .map(|r| pc.min(frames - r * pc))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_warm_up_call_is_one_pass_of_its_frames() {
        assert_eq!(rows_of_one_pass(0, 16), Vec::<usize>::new());
        assert_eq!(rows_of_one_pass(5, 16), vec![5]);
        assert_eq!(rows_of_one_pass(16, 16), vec![16]);
        assert_eq!(rows_of_one_pass(37, 16), vec![16, 16, 5]);
        for frames in 1..=128 {
            let rows = rows_of_one_pass(frames, 16);
            let calls: Vec<(usize, usize)> = rows.iter().copied().enumerate().collect();
            let passes = plan_passes(&calls, 128, 16);
            assert_eq!(passes.len(), 1, "{frames} frames");
            assert_eq!(passes[0].iter().map(|p| p.frames).sum::<usize>(), frames);
        }
    }

    #[test]
    fn passes_respect_caps_and_order() {
        let rows = [(3usize, 5usize), (7, 1), (0, 0), (9, 12)];
        let passes = plan_passes(&rows, 8, 4);
        let mut seen = vec![0usize; rows.len()];
        for pass in &passes {
            let total: usize = pass.iter().map(|p| p.frames).sum();
            assert!(total <= 8 && total > 0);
            let mut slots: Vec<_> = pass.iter().map(|p| p.slot).collect();
            slots.sort();
            slots.dedup();
            assert_eq!(slots.len(), pass.len(), "a slot twice in one pass");
            for p in pass {
                assert!(p.frames <= 4);
                assert_eq!(p.start, seen[p.row], "pieces out of order");
                assert_eq!(p.slot, rows[p.row].0);
                seen[p.row] += p.frames;
            }
        }
        assert_eq!(seen, vec![5, 1, 0, 12]);
        assert!(plan_passes(&[], 8, 4).is_empty());
        assert_eq!(plan_passes(&[(0, 3), (1, 2)], 100, 100).len(), 1);
    }

    #[test]
    fn inputs_layout() {
        let layout = InputLayout {
            rows: 3,
            frames: 4,
            nq: 2,
        };
        let mut book = SlotBook::new(4);
        book.frames[2] = 10;
        book.parity[2] = 1;
        let frames_a = [[1u32; 16], [2; 16]];
        let frames_b = [[5u32; 16]];
        let pieces = [
            Piece {
                row: 0,
                slot: 2,
                start: 0,
                frames: 2,
            },
            Piece {
                row: 1,
                slot: 0,
                start: 0,
                frames: 1,
            },
        ];
        let v = pass_inputs(&layout, &pieces, &book, |p| {
            if p.row == 0 {
                &frames_a[..]
            } else {
                &frames_b[..]
            }
        });
        assert_eq!(v.len(), 5 * 3 + 4 + 8);
        assert_eq!(&v[0..3], &[2, 0, -1]); // slots
        assert_eq!(&v[3..5], &[1, 0]); // parity
        assert_eq!(&v[6..8], &[0, 2]); // first frame
        assert_eq!(&v[9..11], &[2, 1]); // frames
        assert_eq!(&v[12..14], &[10, 0]); // positions
        assert_eq!(&v[15..19], &[0, 0, 1, -1]); // frame_row
        assert_eq!(&v[19..27], &[1, 1, 2, 2, 5, 5, 0, 0]); // codes
        advance(&mut book, &pieces);
        assert_eq!(
            (
                book.frames[2],
                book.parity[2],
                book.frames[0],
                book.parity[0]
            ),
            (12, 0, 1, 1)
        );
        let mut st = StateLayout::default();
        assert_eq!(st.alloc(5), 0);
        assert_eq!(st.alloc(3), 32);
        assert_eq!(st.finish(), 64);
    }
}
