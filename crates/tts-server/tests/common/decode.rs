//! Reference decoders for the server's audio formats, shared by the unit tests of
//! `src/audio` (included there by path) and the integration tests: `symphonia` for wav,
//! flac and mp3, `ogg` + libopus for Ogg Opus (RFC 7845).
// Each includer uses a part.
#![allow(dead_code)]

use std::io::Cursor;

use symphonia::core::audio::SampleBuffer;
use symphonia::core::codecs::DecoderOptions;
use symphonia::core::conv::ConvertibleSample;
use symphonia::core::errors::Error as SymphoniaError;
use symphonia::core::formats::FormatOptions;
use symphonia::core::io::MediaSourceStream;
use symphonia::core::meta::MetadataOptions;
use symphonia::core::probe::Hint;

/// Decodes a whole mono file (or a prefix of one) with symphonia: (sample rate, samples).
pub fn symphonia_decode<S: ConvertibleSample>(bytes: &[u8], ext: &str) -> (u32, Vec<S>) {
    let mss = MediaSourceStream::new(Box::new(Cursor::new(bytes.to_vec())), Default::default());
    let mut hint = Hint::new();
    hint.with_extension(ext);
    let probed = symphonia::default::get_probe()
        .format(
            &hint,
            mss,
            &FormatOptions::default(),
            &MetadataOptions::default(),
        )
        .expect("probe");
    let mut reader = probed.format;
    let track = reader.default_track().expect("track");
    let rate = track.codec_params.sample_rate.expect("rate");
    assert_eq!(track.codec_params.channels.map(|c| c.count()), Some(1));
    let mut decoder = symphonia::default::get_codecs()
        .make(&track.codec_params, &DecoderOptions::default())
        .expect("decoder");
    let mut out = Vec::new();
    loop {
        let packet = match reader.next_packet() {
            Ok(p) => p,
            Err(SymphoniaError::IoError(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                break
            }
            Err(e) => panic!("{ext}: {e}"),
        };
        let decoded = decoder.decode(&packet).expect("decode");
        let mut buf = SampleBuffer::<S>::new(decoded.capacity() as u64, *decoded.spec());
        buf.copy_interleaved_ref(decoded);
        out.extend_from_slice(buf.samples());
    }
    (rate, out)
}

/// An Ogg Opus file (mono, 24 kHz output), parsed and decoded as RFC 7845 says.
pub struct OggOpus {
    pub pre_skip: u64,
    /// Granule position of every page's last packet, in stream order (headers first).
    pub page_granules: Vec<u64>,
    /// All decoded samples (24 kHz), before pre-skip and end trimming.
    pub decoded: Vec<f32>,
    pub audio_packets: usize,
    pub ends_with_eos: bool,
}

impl OggOpus {
    pub fn decode(bytes: &[u8]) -> Self {
        let mut reader = ogg::reading::PacketReader::new(Cursor::new(bytes.to_vec()));
        let head = reader.read_packet().unwrap().expect("OpusHead");
        assert!(head.first_in_stream() && head.last_in_page());
        assert_eq!(&head.data[..8], b"OpusHead");
        assert_eq!(head.data.len(), 19);
        assert_eq!((head.data[8], head.data[9]), (1, 1), "version, channels");
        assert_eq!(head.data[18], 0, "mapping family");
        let pre_skip = u64::from(u16::from_le_bytes([head.data[10], head.data[11]]));
        let tags = reader.read_packet().unwrap().expect("OpusTags");
        assert!(tags.last_in_page());
        assert_eq!(&tags.data[..8], b"OpusTags");
        let mut page_granules = vec![head.absgp_page(), tags.absgp_page()];
        let mut dec = opus::Decoder::new(24_000, opus::Channels::Mono).unwrap();
        let mut decoded = Vec::new();
        let mut buf = vec![0f32; 5760];
        let (mut audio_packets, mut ends_with_eos) = (0, false);
        while let Some(p) = reader.read_packet().unwrap() {
            let n = dec.decode_float(&p.data, &mut buf, false).unwrap();
            decoded.extend_from_slice(&buf[..n]);
            audio_packets += 1;
            if p.last_in_page() {
                page_granules.push(p.absgp_page());
            }
            ends_with_eos = p.last_in_stream();
        }
        OggOpus {
            pre_skip,
            page_granules,
            decoded,
            audio_packets,
            ends_with_eos,
        }
    }

    /// The decoded audio less pre-skip and end padding (the last granule is the end).
    pub fn trimmed(&self) -> &[f32] {
        let end = *self.page_granules.last().unwrap();
        let start = (self.pre_skip / 2) as usize;
        let len = ((end - self.pre_skip) / 2) as usize;
        &self.decoded[start..start + len]
    }
}

/// A complete Ogg Opus stream's audio: it must end the stream; pre-skip and end padding
/// removed.
pub fn opus_decode(bytes: &[u8]) -> Vec<f32> {
    let ogg = OggOpus::decode(bytes);
    assert!(ogg.ends_with_eos, "the last page ends the stream");
    ogg.trimmed().to_vec()
}
