//! The attach socket's wire format (`<dir>/attach.sock`).
//!
//! Both directions carry frames: one kind byte, a big-endian `u32` payload
//! length, the payload. From the shim: the container's `stdout` and
//! `stderr` bytes as they are read (also written to the CRI log), and one
//! `exited` frame with the init's exit status once the container stopped,
//! after which the shim closes the connection. From an attacher: `stdin`
//! bytes (an empty one only declares that it uses stdin), `stdin-close`,
//! and `resize` (tty containers).
//!
//! An attacher that cannot keep up is disconnected rather than allowed to
//! hold the container's output back; closing the connection detaches.

/// Largest payload a frame may carry; a bigger length is a protocol error.
pub const MAX_PAYLOAD: usize = 1024 * 1024;

const HEADER: usize = 5;

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const EXITED: u8 = 3;
const STDIN_CLOSE: u8 = 4;
const RESIZE: u8 = 5;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    Stdin(Vec<u8>),
    StdinClose,
    /// Terminal size in character cells.
    Resize {
        width: u16,
        height: u16,
    },
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    /// Exit status, 128+signal when killed by a signal.
    Exited(i32),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("unknown attach frame kind {0}")]
    UnknownKind(u8),
    #[error("attach frame of {0} bytes exceeds the limit")]
    TooLong(usize),
    #[error("attach frame kind {kind} needs a {want}-byte payload, not {got}")]
    BadLength { kind: u8, want: usize, got: usize },
}

/// Appends the encoding of `frame` to `out`.
pub fn encode(frame: &Frame, out: &mut Vec<u8>) {
    let (kind, payload): (u8, std::borrow::Cow<'_, [u8]>) = match frame {
        Frame::Stdin(d) => (STDIN, d.as_slice().into()),
        Frame::Stdout(d) => (STDOUT, d.as_slice().into()),
        Frame::Stderr(d) => (STDERR, d.as_slice().into()),
        Frame::StdinClose => (STDIN_CLOSE, (&[][..]).into()),
        Frame::Exited(code) => (EXITED, code.to_be_bytes().to_vec().into()),
        Frame::Resize { width, height } => {
            let mut p = width.to_be_bytes().to_vec();
            p.extend_from_slice(&height.to_be_bytes());
            (RESIZE, p.into())
        }
    };
    encode_raw(kind, &payload, out);
}

/// Which of the container's output streams bytes came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// Appends a data frame for `stream` without copying the payload twice.
pub fn encode_output(stream: Stream, data: &[u8], out: &mut Vec<u8>) {
    let kind = match stream {
        Stream::Stdout => STDOUT,
        Stream::Stderr => STDERR,
    };
    encode_raw(kind, data, out);
}

fn encode_raw(kind: u8, payload: &[u8], out: &mut Vec<u8>) {
    out.reserve(HEADER + payload.len());
    out.push(kind);
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
}

/// Splits a byte stream into frames.
#[derive(Debug, Default)]
pub struct Decoder {
    buf: Vec<u8>,
}

impl Decoder {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// Bytes received but not yet decoded.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// The next complete frame, if one is buffered.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, FrameError> {
        if self.buf.len() < HEADER {
            return Ok(None);
        }
        let kind = self.buf[0];
        let len = u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]) as usize;
        if len > MAX_PAYLOAD {
            return Err(FrameError::TooLong(len));
        }
        if !(STDIN..=RESIZE).contains(&kind) {
            return Err(FrameError::UnknownKind(kind));
        }
        if self.buf.len() < HEADER + len {
            return Ok(None);
        }
        let payload: Vec<u8> = self.buf[HEADER..HEADER + len].to_vec();
        self.buf.drain(..HEADER + len);
        let fixed = |want: usize| {
            if payload.len() == want {
                Ok(())
            } else {
                Err(FrameError::BadLength {
                    kind,
                    want,
                    got: payload.len(),
                })
            }
        };
        let frame = match kind {
            STDIN => Frame::Stdin(payload),
            STDOUT => Frame::Stdout(payload),
            STDERR => Frame::Stderr(payload),
            STDIN_CLOSE => {
                fixed(0)?;
                Frame::StdinClose
            }
            EXITED => {
                fixed(4)?;
                Frame::Exited(i32::from_be_bytes([
                    payload[0], payload[1], payload[2], payload[3],
                ]))
            }
            _ => {
                fixed(4)?;
                Frame::Resize {
                    width: u16::from_be_bytes([payload[0], payload[1]]),
                    height: u16::from_be_bytes([payload[2], payload[3]]),
                }
            }
        };
        Ok(Some(frame))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(frame: &Frame) -> Vec<u8> {
        let mut out = Vec::new();
        encode(frame, &mut out);
        out
    }

    #[test]
    fn byte_exact_encodings() {
        assert_eq!(
            bytes(&Frame::Stdin(b"hi".to_vec())),
            [0, 0, 0, 0, 2, b'h', b'i']
        );
        assert_eq!(bytes(&Frame::Stdout(vec![])), [1, 0, 0, 0, 0]);
        assert_eq!(bytes(&Frame::Stderr(vec![9])), [2, 0, 0, 0, 1, 9]);
        assert_eq!(bytes(&Frame::Exited(137)), [3, 0, 0, 0, 4, 0, 0, 0, 137]);
        assert_eq!(bytes(&Frame::StdinClose), [4, 0, 0, 0, 0]);
        assert_eq!(
            bytes(&Frame::Resize {
                width: 258,
                height: 40
            }),
            [5, 0, 0, 0, 4, 1, 2, 0, 40]
        );
        let mut out = Vec::new();
        encode_output(Stream::Stderr, b"x", &mut out);
        assert_eq!(out, bytes(&Frame::Stderr(b"x".to_vec())));
    }

    #[test]
    fn decodes_across_arbitrary_splits() {
        let frames = [
            Frame::Stdout(b"hello".to_vec()),
            Frame::Resize {
                width: 80,
                height: 24,
            },
            Frame::Stdin(vec![]),
            Frame::StdinClose,
            Frame::Exited(-1),
        ];
        let mut wire = Vec::new();
        for f in &frames {
            encode(f, &mut wire);
        }
        for chunk in 1..wire.len() {
            let mut d = Decoder::new();
            let mut got = Vec::new();
            for piece in wire.chunks(chunk) {
                d.push(piece);
                while let Some(f) = d.next_frame().expect("valid") {
                    got.push(f);
                }
            }
            assert_eq!(got, frames, "chunk size {chunk}");
            assert_eq!(d.buffered(), 0);
        }
    }

    #[test]
    fn rejects_bad_frames() {
        let mut d = Decoder::new();
        d.push(&[9, 0, 0, 0, 0]);
        assert_eq!(d.next_frame(), Err(FrameError::UnknownKind(9)));

        let mut d = Decoder::new();
        d.push(&[1, 0xff, 0xff, 0xff, 0xff]);
        assert!(matches!(d.next_frame(), Err(FrameError::TooLong(_))));

        let mut d = Decoder::new();
        d.push(&[5, 0, 0, 0, 2, 0, 80]);
        assert_eq!(
            d.next_frame(),
            Err(FrameError::BadLength {
                kind: 5,
                want: 4,
                got: 2
            })
        );

        // incomplete is not an error
        let mut d = Decoder::new();
        d.push(&[1, 0, 0, 0, 3, b'a']);
        assert_eq!(d.next_frame(), Ok(None));
    }
}
