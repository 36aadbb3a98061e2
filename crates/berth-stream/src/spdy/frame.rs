//! SPDY/3.1 frames (SPDY Protocol draft 3.1, section 2.2 and 2.6): their
//! in-memory form and the byte layout on the wire.

use bytes::{Buf, Bytes, BytesMut};

use super::header_block::{HeaderCompressor, HeaderDecompressor, Headers};
use super::FrameError;

pub const VERSION: u16 = 3;

/// FLAG_FIN on SYN_STREAM, SYN_REPLY, HEADERS and DATA: the sender's half
/// of the stream is closed after this frame.
pub const FLAG_FIN: u8 = 0x01;
/// FLAG_UNIDIRECTIONAL on SYN_STREAM: the receiver never sends on it.
pub const FLAG_UNIDIRECTIONAL: u8 = 0x02;

const TYPE_SYN_STREAM: u16 = 1;
const TYPE_SYN_REPLY: u16 = 2;
const TYPE_RST_STREAM: u16 = 3;
const TYPE_SETTINGS: u16 = 4;
const TYPE_PING: u16 = 6;
const TYPE_GOAWAY: u16 = 7;
const TYPE_HEADERS: u16 = 8;
const TYPE_WINDOW_UPDATE: u16 = 9;

/// SETTINGS id of the initial per-stream flow-control window.
pub const SETTINGS_INITIAL_WINDOW_SIZE: u32 = 7;

/// RST_STREAM status codes (section 2.6.3).
pub mod rst {
    pub const PROTOCOL_ERROR: u32 = 1;
    pub const INVALID_STREAM: u32 = 2;
    pub const REFUSED_STREAM: u32 = 3;
    pub const CANCEL: u32 = 5;
    pub const INTERNAL_ERROR: u32 = 6;
    pub const FLOW_CONTROL_ERROR: u32 = 7;
    pub const STREAM_IN_USE: u32 = 8;
}

/// GOAWAY status codes (section 2.6.6).
pub mod goaway {
    pub const OK: u32 = 0;
    pub const PROTOCOL_ERROR: u32 = 1;
    pub const INTERNAL_ERROR: u32 = 2;
}

/// Frame header (8 bytes) plus the largest payload the 24-bit length allows.
pub const MAX_FRAME_PAYLOAD: usize = 0x00ff_ffff;
const STREAM_ID_MASK: u32 = 0x7fff_ffff;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    pub flags: u8,
    pub id: u32,
    pub value: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    SynStream {
        stream_id: u32,
        associated_to: u32,
        priority: u8,
        slot: u8,
        flags: u8,
        headers: Headers,
    },
    SynReply {
        stream_id: u32,
        flags: u8,
        headers: Headers,
    },
    RstStream {
        stream_id: u32,
        status: u32,
    },
    Settings {
        flags: u8,
        entries: Vec<Setting>,
    },
    Ping {
        id: u32,
    },
    GoAway {
        last_good_stream_id: u32,
        status: u32,
    },
    Headers {
        stream_id: u32,
        flags: u8,
        headers: Headers,
    },
    WindowUpdate {
        stream_id: u32,
        delta: u32,
    },
    Data {
        stream_id: u32,
        flags: u8,
        data: Bytes,
    },
    /// A control frame this implementation does not act on (CREDENTIAL,
    /// NOOP, a future type); the spec says to ignore it.
    Unknown {
        frame_type: u16,
    },
}

fn control_header(out: &mut Vec<u8>, frame_type: u16, flags: u8, len: usize) {
    out.extend_from_slice(&(0x8000 | VERSION).to_be_bytes());
    out.extend_from_slice(&frame_type.to_be_bytes());
    out.extend_from_slice(&((u32::from(flags) << 24) | len as u32).to_be_bytes());
}

/// Encodes frames of one direction of a connection (it owns that
/// direction's header compressor).
#[derive(Default)]
pub struct FrameEncoder {
    headers: HeaderCompressor,
}

impl FrameEncoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends the wire form of `frame` to `out`.
    pub fn encode(&mut self, frame: &Frame, out: &mut Vec<u8>) -> Result<(), FrameError> {
        match frame {
            Frame::SynStream {
                stream_id,
                associated_to,
                priority,
                slot,
                flags,
                headers,
            } => {
                let block = self.headers.compress(headers)?;
                control_header(out, TYPE_SYN_STREAM, *flags, 10 + block.len());
                out.extend_from_slice(&(stream_id & STREAM_ID_MASK).to_be_bytes());
                out.extend_from_slice(&(associated_to & STREAM_ID_MASK).to_be_bytes());
                out.push((priority & 0x07) << 5);
                out.push(*slot);
                out.extend_from_slice(&block);
            }
            Frame::SynReply {
                stream_id,
                flags,
                headers,
            } => {
                let block = self.headers.compress(headers)?;
                control_header(out, TYPE_SYN_REPLY, *flags, 4 + block.len());
                out.extend_from_slice(&(stream_id & STREAM_ID_MASK).to_be_bytes());
                out.extend_from_slice(&block);
            }
            Frame::Headers {
                stream_id,
                flags,
                headers,
            } => {
                let block = self.headers.compress(headers)?;
                control_header(out, TYPE_HEADERS, *flags, 4 + block.len());
                out.extend_from_slice(&(stream_id & STREAM_ID_MASK).to_be_bytes());
                out.extend_from_slice(&block);
            }
            Frame::RstStream { stream_id, status } => {
                control_header(out, TYPE_RST_STREAM, 0, 8);
                out.extend_from_slice(&(stream_id & STREAM_ID_MASK).to_be_bytes());
                out.extend_from_slice(&status.to_be_bytes());
            }
            Frame::Settings { flags, entries } => {
                control_header(out, TYPE_SETTINGS, *flags, 4 + 8 * entries.len());
                out.extend_from_slice(&(entries.len() as u32).to_be_bytes());
                for e in entries {
                    out.extend_from_slice(
                        &((u32::from(e.flags) << 24) | (e.id & 0x00ff_ffff)).to_be_bytes(),
                    );
                    out.extend_from_slice(&e.value.to_be_bytes());
                }
            }
            Frame::Ping { id } => {
                control_header(out, TYPE_PING, 0, 4);
                out.extend_from_slice(&id.to_be_bytes());
            }
            Frame::GoAway {
                last_good_stream_id,
                status,
            } => {
                control_header(out, TYPE_GOAWAY, 0, 8);
                out.extend_from_slice(&(last_good_stream_id & STREAM_ID_MASK).to_be_bytes());
                out.extend_from_slice(&status.to_be_bytes());
            }
            Frame::WindowUpdate { stream_id, delta } => {
                control_header(out, TYPE_WINDOW_UPDATE, 0, 8);
                out.extend_from_slice(&(stream_id & STREAM_ID_MASK).to_be_bytes());
                out.extend_from_slice(&(delta & STREAM_ID_MASK).to_be_bytes());
            }
            Frame::Data {
                stream_id,
                flags,
                data,
            } => {
                if data.len() > MAX_FRAME_PAYLOAD {
                    return Err(FrameError::TooLarge(data.len()));
                }
                out.extend_from_slice(&(stream_id & STREAM_ID_MASK).to_be_bytes());
                out.extend_from_slice(
                    &((u32::from(*flags) << 24) | data.len() as u32).to_be_bytes(),
                );
                out.extend_from_slice(data);
            }
            Frame::Unknown { frame_type } => return Err(FrameError::UnknownType(*frame_type)),
        }
        Ok(())
    }
}

/// Decodes frames of one direction of a connection (it owns that
/// direction's header decompressor).
pub struct FrameDecoder {
    headers: HeaderDecompressor,
    max_payload: usize,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        Self::new()
    }
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

impl FrameDecoder {
    pub fn new() -> Self {
        Self {
            headers: HeaderDecompressor::new(),
            max_payload: MAX_FRAME_PAYLOAD,
        }
    }

    /// Takes one whole frame off the front of `buf`, or `None` if `buf` does
    /// not hold one yet.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
        if buf.len() < 8 {
            return Ok(None);
        }
        let first = be32(&buf[0..4]);
        let second = be32(&buf[4..8]);
        let flags = (second >> 24) as u8;
        let len = (second & 0x00ff_ffff) as usize;
        if len > self.max_payload {
            return Err(FrameError::TooLarge(len));
        }
        if buf.len() < 8 + len {
            buf.reserve(8 + len - buf.len());
            return Ok(None);
        }
        buf.advance(8);
        let payload = buf.split_to(len).freeze();
        if first & 0x8000_0000 == 0 {
            return Ok(Some(Frame::Data {
                stream_id: first & STREAM_ID_MASK,
                flags,
                data: payload,
            }));
        }
        let version = ((first >> 16) & 0x7fff) as u16;
        if version != VERSION {
            return Err(FrameError::UnsupportedVersion(version));
        }
        let frame_type = (first & 0xffff) as u16;
        let p = &payload[..];
        let need = |n: usize| {
            if p.len() < n {
                Err(FrameError::Truncated(frame_type))
            } else {
                Ok(())
            }
        };
        let frame = match frame_type {
            TYPE_SYN_STREAM => {
                need(10)?;
                Frame::SynStream {
                    stream_id: be32(&p[0..4]) & STREAM_ID_MASK,
                    associated_to: be32(&p[4..8]) & STREAM_ID_MASK,
                    priority: p[8] >> 5,
                    slot: p[9],
                    flags,
                    headers: self.headers.decompress(&p[10..])?,
                }
            }
            TYPE_SYN_REPLY => {
                need(4)?;
                Frame::SynReply {
                    stream_id: be32(&p[0..4]) & STREAM_ID_MASK,
                    flags,
                    headers: self.headers.decompress(&p[4..])?,
                }
            }
            TYPE_HEADERS => {
                need(4)?;
                Frame::Headers {
                    stream_id: be32(&p[0..4]) & STREAM_ID_MASK,
                    flags,
                    headers: self.headers.decompress(&p[4..])?,
                }
            }
            TYPE_RST_STREAM => {
                need(8)?;
                Frame::RstStream {
                    stream_id: be32(&p[0..4]) & STREAM_ID_MASK,
                    status: be32(&p[4..8]),
                }
            }
            TYPE_SETTINGS => {
                need(4)?;
                let count = be32(&p[0..4]) as usize;
                if p.len() < 4 + count.saturating_mul(8) {
                    return Err(FrameError::Truncated(frame_type));
                }
                let entries = p[4..4 + 8 * count]
                    .chunks_exact(8)
                    .map(|e| {
                        let word = be32(&e[0..4]);
                        Setting {
                            flags: (word >> 24) as u8,
                            id: word & 0x00ff_ffff,
                            value: be32(&e[4..8]),
                        }
                    })
                    .collect();
                Frame::Settings { flags, entries }
            }
            TYPE_PING => {
                need(4)?;
                Frame::Ping { id: be32(&p[0..4]) }
            }
            TYPE_GOAWAY => {
                // SPDY/2 peers sent no status; treat a missing one as OK.
                need(4)?;
                Frame::GoAway {
                    last_good_stream_id: be32(&p[0..4]) & STREAM_ID_MASK,
                    status: if p.len() >= 8 { be32(&p[4..8]) } else { 0 },
                }
            }
            TYPE_WINDOW_UPDATE => {
                need(8)?;
                Frame::WindowUpdate {
                    stream_id: be32(&p[0..4]) & STREAM_ID_MASK,
                    delta: be32(&p[4..8]) & STREAM_ID_MASK,
                }
            }
            other => Frame::Unknown { frame_type: other },
        };
        Ok(Some(frame))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn encode(frame: &Frame) -> Vec<u8> {
        let mut out = Vec::new();
        FrameEncoder::new().encode(frame, &mut out).unwrap();
        out
    }

    fn decode_one(bytes: &[u8]) -> Frame {
        let mut buf = BytesMut::from(bytes);
        let frame = FrameDecoder::new().decode(&mut buf).unwrap().unwrap();
        assert!(buf.is_empty(), "frame left {} bytes", buf.len());
        frame
    }

    fn round_trip(frame: Frame, wire: &[u8]) {
        assert_eq!(encode(&frame), wire);
        assert_eq!(decode_one(wire), frame);
    }

    #[test]
    fn rst_stream() {
        round_trip(
            Frame::RstStream {
                stream_id: 5,
                status: rst::CANCEL,
            },
            &hex("80030003000000080000000500000005"),
        );
    }

    #[test]
    fn settings() {
        round_trip(
            Frame::Settings {
                flags: 0,
                entries: vec![Setting {
                    flags: 0,
                    id: SETTINGS_INITIAL_WINDOW_SIZE,
                    value: 0x10000,
                }],
            },
            &hex("800300040000000c000000010000000700010000"),
        );
    }

    #[test]
    fn ping() {
        round_trip(Frame::Ping { id: 1 }, &hex("800300060000000400000001"));
    }

    #[test]
    fn goaway() {
        round_trip(
            Frame::GoAway {
                last_good_stream_id: 7,
                status: goaway::OK,
            },
            &hex("80030007000000080000000700000000"),
        );
    }

    #[test]
    fn window_update() {
        round_trip(
            Frame::WindowUpdate {
                stream_id: 3,
                delta: 0x8000,
            },
            &hex("80030009000000080000000300008000"),
        );
    }

    #[test]
    fn data_with_fin() {
        round_trip(
            Frame::Data {
                stream_id: 3,
                flags: FLAG_FIN,
                data: Bytes::from_static(b"hi"),
            },
            &hex("00000003010000026869"),
        );
    }

    /// Frames as Go's SPDY framer (moby/spdystream, which client-go uses)
    /// writes them for a client opening an error and a stdout stream, and
    /// the reply after them: all three share one zlib stream.
    #[test]
    fn decodes_header_blocks_from_a_go_client() {
        let wire = [
            hex("80030001000000290000000100000000000078f9e3c6a7c26260606004a7b392a2d4c45c6851c29a0a0a6800000000ffff"),
            hex("800300010000001900000003000000000000c22ac5565c92925f5a02000000ffff"),
            hex("800300020000000e000000016260606000000000ffff"),
        ]
        .concat();
        let mut buf = BytesMut::from(&wire[..]);
        let mut decoder = FrameDecoder::new();
        let first = decoder.decode(&mut buf).unwrap().unwrap();
        assert_eq!(
            first,
            Frame::SynStream {
                stream_id: 1,
                associated_to: 0,
                priority: 0,
                slot: 0,
                flags: 0,
                headers: Headers::new().with("streamtype", "error"),
            }
        );
        let second = decoder.decode(&mut buf).unwrap().unwrap();
        let Frame::SynStream {
            stream_id, headers, ..
        } = second
        else {
            panic!("expected SYN_STREAM, got {second:?}");
        };
        assert_eq!(stream_id, 3);
        assert_eq!(headers.get("streamType"), Some("stdout"));
        assert_eq!(
            decoder.decode(&mut buf).unwrap().unwrap(),
            Frame::SynReply {
                stream_id: 1,
                flags: 0,
                headers: Headers::new(),
            }
        );
        assert!(decoder.decode(&mut buf).unwrap().is_none());
    }

    #[test]
    fn syn_stream_and_reply_round_trip_through_one_zlib_stream() {
        let frames = [
            Frame::SynStream {
                stream_id: 1,
                associated_to: 0,
                priority: 2,
                slot: 0,
                flags: FLAG_FIN,
                headers: Headers::new()
                    .with("streamtype", "data")
                    .with("port", "80")
                    .with("requestid", "0"),
            },
            Frame::SynReply {
                stream_id: 1,
                flags: 0,
                headers: Headers::new(),
            },
            Frame::Headers {
                stream_id: 1,
                flags: FLAG_FIN,
                headers: Headers::new().with("x", "y"),
            },
        ];
        let mut encoder = FrameEncoder::new();
        let mut wire = Vec::new();
        for f in &frames {
            encoder.encode(f, &mut wire).unwrap();
        }
        // SYN_STREAM: control bit, version 3, type 1, FIN, then stream 1.
        assert_eq!(&wire[0..5], &hex("8003000101"));
        assert_eq!(&wire[8..12], &hex("00000001"));
        assert_eq!(wire[16], 2 << 5);
        let mut buf = BytesMut::from(&wire[..]);
        let mut decoder = FrameDecoder::new();
        for f in &frames {
            assert_eq!(&decoder.decode(&mut buf).unwrap().unwrap(), f);
        }
    }

    #[test]
    fn partial_frames_wait_for_more_bytes() {
        let wire = hex("800300060000000400000001");
        let mut decoder = FrameDecoder::new();
        let mut buf = BytesMut::from(&wire[..7]);
        assert!(decoder.decode(&mut buf).unwrap().is_none());
        buf.extend_from_slice(&wire[7..11]);
        assert!(decoder.decode(&mut buf).unwrap().is_none());
        buf.extend_from_slice(&wire[11..]);
        assert_eq!(
            decoder.decode(&mut buf).unwrap(),
            Some(Frame::Ping { id: 1 })
        );
    }

    #[test]
    fn rejects_other_versions() {
        let mut buf = BytesMut::from(&hex("800200060000000400000001")[..]);
        assert!(matches!(
            FrameDecoder::new().decode(&mut buf),
            Err(FrameError::UnsupportedVersion(2))
        ));
    }
}
