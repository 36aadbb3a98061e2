//! Async reads and writes on a raw fd the shim handed over: a pipe end or
//! a pty master. tokio's own pipe type refuses a pty, so one small type
//! serves both.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use nix::fcntl::{fcntl, FcntlArg, OFlag};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A non-blocking fd registered with tokio. Clones share the fd (a pty
/// master is read and written through two clones); it closes with the last.
#[derive(Clone)]
pub struct FdIo(Arc<AsyncFd<OwnedFd>>);

impl FdIo {
    pub fn new(fd: OwnedFd) -> io::Result<Self> {
        let flags = fcntl(&fd, FcntlArg::F_GETFL).map_err(io::Error::from)?;
        let flags = OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK;
        fcntl(&fd, FcntlArg::F_SETFL(flags)).map_err(io::Error::from)?;
        // SAFETY: an OwnedFd stays open and names the same file until the
        // AsyncFd (its owner) drops it.
        let registered = unsafe { AsyncFd::register(fd) }.map_err(|err| err.into_parts().1)?;
        Ok(Self(Arc::new(registered)))
    }

    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.0.get_ref().as_fd()
    }
}

impl AsyncRead for FdIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            let mut guard = ready!(self.0.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            match guard.try_io(|fd| raw_read(fd.get_ref(), unfilled)) {
                Ok(Ok(n)) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                // a pty master reads EIO once no process holds the slave:
                // that is its end of file
                Ok(Err(err)) if err.raw_os_error() == Some(nix::libc::EIO) => {
                    return Poll::Ready(Ok(()))
                }
                Ok(Err(err)) => return Poll::Ready(Err(err)),
                Err(_would_block) => continue,
            }
        }
    }
}

impl AsyncWrite for FdIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            let mut guard = ready!(self.0.poll_write_ready(cx))?;
            match guard.try_io(|fd| raw_write(fd.get_ref(), data)) {
                Ok(result) => return Poll::Ready(result),
                Err(_would_block) => continue,
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

fn raw_read(fd: &OwnedFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: reads at most buf.len() bytes into a live, exclusive buffer.
    let n = unsafe { nix::libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

fn raw_write(fd: &OwnedFd, data: &[u8]) -> io::Result<usize> {
    // SAFETY: writes at most data.len() bytes from a live buffer.
    let n = unsafe { nix::libc::write(fd.as_raw_fd(), data.as_ptr().cast(), data.len()) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_pipe_both_ways_and_its_end() {
        let (r, w) = nix::unistd::pipe().expect("pipe");
        let mut reader = FdIo::new(r).expect("reader");
        let mut writer = FdIo::new(w).expect("writer");
        writer.write_all(b"hello").await.expect("write");
        drop(writer);
        let mut got = Vec::new();
        reader.read_to_end(&mut got).await.expect("read");
        assert_eq!(got, b"hello");
    }

    #[tokio::test]
    async fn a_pty_master_ends_when_the_slave_closes() {
        let pty = nix::pty::openpty(None, None).expect("openpty");
        let mut master = FdIo::new(pty.master).expect("master");
        let mut slave = std::fs::File::from(pty.slave);
        std::io::Write::write_all(&mut slave, b"out").expect("write slave");
        drop(slave);
        let mut got = Vec::new();
        master.read_to_end(&mut got).await.expect("read to EIO");
        assert_eq!(got, b"out");
    }
}
