//! One container output stream (a pipe, or the pty master of a `--tty`
//! container) pumped into the CRI log, and a copy to attachers.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use crate::crilog::{LineSplitter, Stream};
use crate::logfile::LogFile;
use crate::timestamp;

/// How much one readiness event reads at most, so one busy stream cannot
/// starve the other or the control socket.
const READ_CHUNK: usize = 64 * 1024;

#[derive(Debug)]
pub struct OutputPipe {
    file: File,
    splitter: LineSplitter,
    eof: bool,
    buf: Vec<u8>,
}

impl OutputPipe {
    /// `fd` must be non-blocking.
    pub fn new(fd: OwnedFd, stream: Stream, max_line: usize) -> Self {
        Self {
            file: File::from(fd),
            splitter: LineSplitter::new(stream, max_line),
            eof: false,
            buf: vec![0u8; READ_CHUNK],
        }
    }

    pub fn is_eof(&self) -> bool {
        self.eof
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }

    /// Reads what is available (up to one chunk) and writes the completed
    /// records to `log`, then hands the raw bytes to `copy`. At end of file
    /// the partial tail is written too. Returns false when nothing more can
    /// be read now.
    pub fn pump(&mut self, log: &mut LogFile, copy: &mut dyn FnMut(Stream, &[u8])) -> bool {
        if self.eof {
            return false;
        }
        let mut out = Vec::new();
        let more = match self.file.read(&mut self.buf) {
            Ok(0) => {
                self.finish(&mut out);
                false
            }
            Ok(n) => {
                self.splitter
                    .push(&self.buf[..n], &timestamp::now(), &mut out);
                log.write(&out);
                copy(self.splitter.stream(), &self.buf[..n]);
                return true;
            }
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => false,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => true,
            // A pty master reads EIO once every slave side is closed.
            Err(err) => {
                if err.raw_os_error() != Some(nix::libc::EIO) {
                    tracing::warn!(%err, stream = self.splitter.stream().as_str(), "reading container output");
                }
                self.finish(&mut out);
                false
            }
        };
        log.write(&out);
        more
    }

    /// Reads until the stream would block or ends (bounded, so a writer
    /// that never pauses cannot hold the shim here).
    pub fn pump_all(&mut self, log: &mut LogFile, copy: &mut dyn FnMut(Stream, &[u8])) {
        for _ in 0..256 {
            if !self.pump(log, copy) {
                return;
            }
        }
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        self.splitter.finish(&timestamp::now(), out);
        self.eof = true;
    }
}
