//! SPDY/3 name/value header blocks: the uncompressed layout (section 2.6.10)
//! and the zlib stream each direction of a connection compresses them into.
//!
//! One compressor and one decompressor live for the whole connection: every
//! header block continues the previous one's zlib stream and ends with a
//! sync flush, so the peer can decode each frame as it arrives.

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

use super::dictionary::HEADER_DICTIONARY;
use super::FrameError;

/// Header name/value pairs in wire order. Names are lowercase on the wire;
/// several values of one name travel NUL-separated in one value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Headers(pub Vec<(String, String)>);

impl Headers {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a pair; the name is lowercased as SPDY requires.
    pub fn with(mut self, name: &str, value: &str) -> Self {
        self.0.push((name.to_ascii_lowercase(), value.to_string()));
        self
    }

    /// The first value of `name` (case-insensitive), as Go's `Header.Get`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.split('\0').next().unwrap_or(v))
    }
}

/// Largest header block we inflate; request headers here are a few bytes.
const MAX_HEADER_BLOCK: usize = 256 * 1024;

/// Serializes `headers` into the uncompressed SPDY/3 block layout:
/// a 32-bit pair count, then 32-bit length-prefixed names and values.
pub fn encode_block(headers: &Headers) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(headers.0.len() as u32).to_be_bytes());
    for (name, value) in &headers.0 {
        let name = name.to_ascii_lowercase();
        out.extend_from_slice(&(name.len() as u32).to_be_bytes());
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&(value.len() as u32).to_be_bytes());
        out.extend_from_slice(value.as_bytes());
    }
    out
}

/// Parses an uncompressed header block.
pub fn decode_block(block: &[u8]) -> Result<Headers, FrameError> {
    let mut rest = block;
    let take_u32 = |rest: &mut &[u8]| -> Result<u32, FrameError> {
        if rest.len() < 4 {
            return Err(FrameError::HeaderBlock("truncated".into()));
        }
        let (head, tail) = rest.split_at(4);
        *rest = tail;
        Ok(u32::from_be_bytes([head[0], head[1], head[2], head[3]]))
    };
    let count = take_u32(&mut rest)? as usize;
    let mut pairs = Vec::with_capacity(count.min(64));
    for _ in 0..count {
        let field = |rest: &mut &[u8]| -> Result<String, FrameError> {
            let len = take_u32(rest)? as usize;
            if rest.len() < len {
                return Err(FrameError::HeaderBlock("truncated".into()));
            }
            let (bytes, tail) = rest.split_at(len);
            *rest = tail;
            String::from_utf8(bytes.to_vec())
                .map_err(|_| FrameError::HeaderBlock("header is not UTF-8".into()))
        };
        let name = field(&mut rest)?.to_ascii_lowercase();
        let value = field(&mut rest)?;
        pairs.push((name, value));
    }
    Ok(Headers(pairs))
}

/// The sending half: one zlib stream per connection direction.
pub struct HeaderCompressor {
    zlib: Compress,
    primed: bool,
}

impl Default for HeaderCompressor {
    fn default() -> Self {
        Self::new()
    }
}

impl HeaderCompressor {
    pub fn new() -> Self {
        Self {
            zlib: Compress::new(Compression::best(), true),
            primed: false,
        }
    }

    /// Compresses one header block and sync-flushes it.
    pub fn compress(&mut self, headers: &Headers) -> Result<Vec<u8>, FrameError> {
        if !self.primed {
            // Setting the dictionary before the first byte makes the zlib
            // header carry FDICT and the dictionary's Adler-32, as SPDY/3
            // requires.
            self.zlib
                .set_dictionary(HEADER_DICTIONARY)
                .map_err(|e| FrameError::HeaderBlock(e.to_string()))?;
            self.primed = true;
        }
        let input = encode_block(headers);
        let start = self.zlib.total_in();
        let mut out = Vec::with_capacity(input.len() + 64);
        loop {
            let consumed = (self.zlib.total_in() - start) as usize;
            if out.capacity() - out.len() < 64 {
                out.reserve(1024);
            }
            self.zlib
                .compress_vec(&input[consumed..], &mut out, FlushCompress::Sync)
                .map_err(|e| FrameError::HeaderBlock(e.to_string()))?;
            let consumed = (self.zlib.total_in() - start) as usize;
            // The flush is complete once zlib stops filling the whole buffer.
            if consumed == input.len() && out.len() < out.capacity() {
                return Ok(out);
            }
        }
    }
}

/// The receiving half: inflates each header block in the connection's
/// continuing zlib stream.
pub struct HeaderDecompressor {
    zlib: Decompress,
}

impl Default for HeaderDecompressor {
    fn default() -> Self {
        Self::new()
    }
}

impl HeaderDecompressor {
    pub fn new() -> Self {
        Self {
            zlib: Decompress::new(true),
        }
    }

    pub fn decompress(&mut self, input: &[u8]) -> Result<Headers, FrameError> {
        let start = self.zlib.total_in();
        let mut out = Vec::with_capacity(input.len() * 4 + 64);
        loop {
            let consumed = (self.zlib.total_in() - start) as usize;
            if out.capacity() - out.len() < 64 {
                out.reserve(1024);
            }
            match self
                .zlib
                .decompress_vec(&input[consumed..], &mut out, FlushDecompress::Sync)
            {
                Ok(Status::StreamEnd) => {
                    return Err(FrameError::HeaderBlock("zlib stream ended".into()))
                }
                Ok(_) => {}
                Err(e) if e.needs_dictionary().is_some() => {
                    self.zlib
                        .set_dictionary(HEADER_DICTIONARY)
                        .map_err(|e| FrameError::HeaderBlock(e.to_string()))?;
                    continue;
                }
                Err(e) => return Err(FrameError::HeaderBlock(e.to_string())),
            }
            if out.len() > MAX_HEADER_BLOCK {
                return Err(FrameError::HeaderBlock("header block too large".into()));
            }
            let consumed = (self.zlib.total_in() - start) as usize;
            if consumed == input.len() && out.len() < out.capacity() {
                break;
            }
        }
        decode_block(&out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dictionary_is_the_spdy3_one() {
        // The dictionary id every SPDY/3 header stream announces.
        let mut a: u32 = 1;
        let mut b: u32 = 0;
        for &byte in HEADER_DICTIONARY.iter() {
            a = (a + byte as u32) % 65521;
            b = (b + a) % 65521;
        }
        assert_eq!((b << 16) | a, 0xe3c6_a7c2);
    }

    #[test]
    fn block_layout_is_length_prefixed() {
        let block = encode_block(&Headers::new().with("streamType", "error"));
        assert_eq!(
            block,
            b"\x00\x00\x00\x01\x00\x00\x00\x0astreamtype\x00\x00\x00\x05error".to_vec()
        );
        assert_eq!(
            decode_block(&block).unwrap().get("streamtype"),
            Some("error")
        );
    }

    #[test]
    fn compressed_blocks_start_with_the_dictionary_id_and_round_trip() {
        let mut c = HeaderCompressor::new();
        let mut d = HeaderDecompressor::new();
        let h1 = Headers::new().with("streamtype", "stdout");
        let first = c.compress(&h1).unwrap();
        // zlib header: deflate/32K window, FDICT set, then the dictionary id.
        assert_eq!(first[0], 0x78);
        assert_ne!(first[1] & 0x20, 0);
        assert_eq!(&first[2..6], &[0xe3, 0xc6, 0xa7, 0xc2]);
        // A sync flush ends every block with an empty stored block.
        assert!(first.ends_with(&[0x00, 0x00, 0xff, 0xff]));
        assert_eq!(d.decompress(&first).unwrap(), h1);
        let h2 = Headers::new()
            .with("streamtype", "stderr")
            .with("port", "80");
        let second = c.compress(&h2).unwrap();
        assert_eq!(d.decompress(&second).unwrap(), h2);
    }
}
