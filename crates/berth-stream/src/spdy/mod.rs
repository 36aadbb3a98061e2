//! SPDY/3.1, the multiplexing layer under the SPDY flavour of the
//! remotecommand and portforward protocols.

pub mod dictionary;
pub mod frame;
pub mod header_block;
pub mod session;

pub use frame::{Frame, FrameDecoder, FrameEncoder};
pub use header_block::Headers;
pub use session::{Role, Session, SessionConfig, Stream, StreamReader, StreamWriter};

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("bad SPDY header block: {0}")]
    HeaderBlock(String),
    #[error("SPDY frame of {0} bytes is too large")]
    TooLarge(usize),
    #[error("unsupported SPDY version {0}")]
    UnsupportedVersion(u16),
    #[error("truncated SPDY control frame of type {0}")]
    Truncated(u16),
    #[error("cannot encode SPDY control frame of type {0}")]
    UnknownType(u16),
}
