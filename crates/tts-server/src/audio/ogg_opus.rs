//! Opus in Ogg (RFC 7845), the `opus` format.
//!
//! libopus encodes 20 ms packets straight from the input rate (8, 12, 16, 24 or 48 kHz; no
//! resampling). The stream is an `OpusHead` page (pre-skip = the encoder's look-ahead),
//! an `OpusTags` page, then audio pages: every `push` that completes a packet ends with a
//! flushed page, so a client can decode what it has received. Granule positions count
//! 48 kHz samples, pre-skip included. At `finish` the partial packet is padded with
//! silence and enough silent packets follow to push the look-ahead out; the last page
//! (end-of-stream flag set) carries the true end, pre-skip + input length, so decoders
//! trim the padding.

use ogg::writing::{PacketWriteEndInfo, PacketWriter};

use super::{pcm, AudioError, AudioFormat, Encoder};

/// 32 kb/s VBR: full-band (12 kHz) speech at ~4 kB/s on the wire.
const BITRATE_BPS: i32 = 32_000;
/// libopus's default is 9; from 7 up encoding is ~4x slower here (60 s of 24 kHz
/// speech-like audio: ~620 ms at 9, ~140 ms at 5) with no better waveform fidelity
/// (correlation 0.991 at 9, 0.995 at 5). A server encodes many streams on the host CPU.
const COMPLEXITY: i32 = 5;
/// Packet duration.
const FRAME_MS: u32 = 20;
/// The one logical stream's serial number (fixed: each response is its own file).
const SERIAL: u32 = 0x5154_5453;
/// Granule positions and pre-skip are in 48 kHz samples whatever the input rate.
const GRANULE_RATE: u32 = 48_000;
/// Largest packet libopus can produce for one 20 ms frame is 1275 bytes.
const MAX_PACKET_BYTES: usize = 1275;
const SUPPORTED_RATES: &str = "8000, 12000, 16000, 24000, 48000 Hz";

/// The `opus` encoder.
pub struct OggOpusEncoder {
    opus: opus::Encoder,
    writer: PacketWriter<'static, Vec<u8>>,
    sample_rate: u32,
    /// Samples per packet at the input rate.
    frame_len: usize,
    /// 48 kHz ticks per input sample.
    ticks_per_sample: u64,
    /// The encoder's look-ahead, in input samples.
    lookahead: u64,
    /// Samples of the next packet, fewer than `frame_len`.
    pending: Vec<f32>,
    /// Input samples taken so far.
    samples_in: u64,
    /// Packets encoded so far.
    packets_out: u64,
    headers_written: bool,
    scratch: Vec<u8>,
}

impl OggOpusEncoder {
    /// Mono, 20 ms packets, 32 kb/s VBR, complexity 5.
    pub fn new(sample_rate: u32) -> Result<Self, AudioError> {
        if ![8_000, 12_000, 16_000, 24_000, 48_000].contains(&sample_rate) {
            return Err(AudioError::UnsupportedSampleRate {
                format: AudioFormat::Opus,
                sample_rate,
                supported: SUPPORTED_RATES,
            });
        }
        let err = |e: opus::Error| AudioError::codec(AudioFormat::Opus, e);
        let mut opus =
            opus::Encoder::new(sample_rate, opus::Channels::Mono, opus::Application::Audio)
                .map_err(err)?;
        opus.set_bitrate(opus::Bitrate::Bits(BITRATE_BPS))
            .map_err(err)?;
        opus.set_complexity(COMPLEXITY).map_err(err)?;
        let lookahead = u64::try_from(opus.get_lookahead().map_err(err)?)
            .map_err(|_| AudioError::codec(AudioFormat::Opus, "negative look-ahead"))?;
        let frame_len = (sample_rate * FRAME_MS / 1000) as usize;
        Ok(OggOpusEncoder {
            opus,
            writer: PacketWriter::new(Vec::new()),
            sample_rate,
            frame_len,
            ticks_per_sample: u64::from(GRANULE_RATE / sample_rate),
            lookahead,
            pending: Vec::with_capacity(frame_len),
            samples_in: 0,
            packets_out: 0,
            headers_written: false,
            scratch: vec![0; MAX_PACKET_BYTES],
        })
    }

    /// Pre-skip in 48 kHz samples, as `OpusHead` states it.
    pub fn pre_skip(&self) -> u64 {
        self.lookahead * self.ticks_per_sample
    }

    /// `OpusHead` (RFC 7845 §5.1): version 1, mono, channel mapping family 0.
    fn opus_head(&self) -> Result<Vec<u8>, AudioError> {
        let pre_skip = u16::try_from(self.pre_skip())
            .map_err(|_| AudioError::codec(AudioFormat::Opus, "pre-skip exceeds 16 bits"))?;
        let mut h = Vec::with_capacity(19);
        h.extend_from_slice(b"OpusHead");
        h.push(1); // version
        h.push(1); // channels
        h.extend_from_slice(&pre_skip.to_le_bytes());
        h.extend_from_slice(&self.sample_rate.to_le_bytes()); // informational
        h.extend_from_slice(&0i16.to_le_bytes()); // output gain
        h.push(0); // mapping family: mono/stereo, no table
        Ok(h)
    }

    /// `OpusTags` (RFC 7845 §5.2): the library's vendor string, no comments.
    fn opus_tags() -> Vec<u8> {
        let vendor = opus::version().as_bytes();
        let mut t = Vec::with_capacity(16 + vendor.len());
        t.extend_from_slice(b"OpusTags");
        t.extend_from_slice(&(vendor.len() as u32).to_le_bytes());
        t.extend_from_slice(vendor);
        t.extend_from_slice(&0u32.to_le_bytes());
        t
    }

    fn write_headers(&mut self) -> Result<(), AudioError> {
        if self.headers_written {
            return Ok(());
        }
        let head = self.opus_head()?;
        // Each header packet ends its own page, granule 0 (RFC 7845 §3).
        self.write(head, PacketWriteEndInfo::EndPage, 0)?;
        self.write(Self::opus_tags(), PacketWriteEndInfo::EndPage, 0)?;
        self.headers_written = true;
        Ok(())
    }

    fn write(
        &mut self,
        packet: Vec<u8>,
        end: PacketWriteEndInfo,
        granule: u64,
    ) -> Result<(), AudioError> {
        self.writer
            .write_packet(packet, SERIAL, end, granule)
            .map_err(|e| AudioError::codec(AudioFormat::Opus, e))
    }

    /// Encodes `pending` (exactly one frame) into a packet and its end granule.
    fn encode_pending(&mut self) -> Result<(Vec<u8>, u64), AudioError> {
        let n = self
            .opus
            .encode_float(&self.pending, &mut self.scratch)
            .map_err(|e| AudioError::codec(AudioFormat::Opus, e))?;
        self.pending.clear();
        self.packets_out += 1;
        let granule = self.packets_out * self.frame_len as u64 * self.ticks_per_sample;
        Ok((self.scratch[..n].to_vec(), granule))
    }

    /// Writes `packets` and ends the page (or the stream) after the last one.
    fn write_packets(
        &mut self,
        packets: Vec<(Vec<u8>, u64)>,
        end: PacketWriteEndInfo,
    ) -> Result<(), AudioError> {
        let last = packets.len().saturating_sub(1);
        for (i, (packet, granule)) in packets.into_iter().enumerate() {
            let info = if i == last {
                end
            } else {
                PacketWriteEndInfo::NormalPacket
            };
            self.write(packet, info, granule)?;
        }
        Ok(())
    }

    fn take_bytes(&mut self) -> Vec<u8> {
        std::mem::take(self.writer.inner_mut())
    }
}

impl Encoder for OggOpusEncoder {
    fn push(&mut self, samples: &[f32]) -> Result<Vec<u8>, AudioError> {
        self.write_headers()?;
        let mut packets = Vec::new();
        let mut rest = samples;
        while !rest.is_empty() {
            let take = (self.frame_len - self.pending.len()).min(rest.len());
            let (now, later) = rest.split_at(take);
            self.pending.extend(now.iter().copied().map(pcm::sanitize));
            rest = later;
            if self.pending.len() == self.frame_len {
                packets.push(self.encode_pending()?);
            }
        }
        self.samples_in += samples.len() as u64;
        self.write_packets(packets, PacketWriteEndInfo::EndPage)?;
        Ok(self.take_bytes())
    }

    fn finish(&mut self) -> Result<Vec<u8>, AudioError> {
        self.write_headers()?;
        // Enough packets that decoding them yields look-ahead + input samples; at least
        // one, to carry the end-of-stream flag (look-ahead > 0 makes that so anyway).
        let frame_len = self.frame_len as u64;
        let needed = (self.samples_in + self.lookahead)
            .div_ceil(frame_len)
            .max(self.packets_out + 1);
        let mut packets = Vec::new();
        while self.packets_out < needed {
            self.pending.resize(self.frame_len, 0.0);
            packets.push(self.encode_pending()?);
        }
        // End trimming: the last granule is the true end, less than the packets decode to.
        if let Some(last) = packets.last_mut() {
            last.1 = self.pre_skip() + self.samples_in * self.ticks_per_sample;
        }
        self.write_packets(packets, PacketWriteEndInfo::EndStream)?;
        Ok(self.take_bytes())
    }
}
