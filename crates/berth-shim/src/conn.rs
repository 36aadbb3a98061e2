//! One client connection to the control socket: JSON lines in, JSON lines
//! out, non-blocking on both sides. While a request waits for a deferred
//! answer (exec, shutdown) the connection reads no further requests, so
//! answers stay in request order.

use std::io::{self, IoSlice, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

use berth_shim_api::protocol::Response;

/// A request line longer than this is refused and the connection closed.
pub const MAX_REQUEST_LINE: usize = 1024 * 1024;

#[derive(Debug)]
pub struct Conn {
    stream: UnixStream,
    inbuf: Vec<u8>,
    outbuf: Vec<u8>,
    /// Fds to send with the byte at this offset of `outbuf` (the start of
    /// a `session` answer).
    fds_at: Option<(usize, Vec<OwnedFd>)>,
    read_closed: bool,
    broken: bool,
    hangup: bool,
    busy: bool,
}

/// What the next buffered input holds.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    Request(Vec<u8>),
    TooLong,
}

impl Conn {
    pub fn new(stream: UnixStream) -> io::Result<Self> {
        stream.set_nonblocking(true)?;
        Ok(Self {
            stream,
            inbuf: Vec::new(),
            outbuf: Vec::new(),
            fds_at: None,
            read_closed: false,
            broken: false,
            hangup: false,
            busy: false,
        })
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.stream.as_fd()
    }

    pub fn wants_read(&self) -> bool {
        !self.read_closed && !self.broken && !self.busy
    }

    pub fn wants_write(&self) -> bool {
        !self.outbuf.is_empty() && !self.broken
    }

    /// A deferred answer is pending (or no longer).
    pub fn set_busy(&mut self, busy: bool) {
        self.busy = busy;
    }

    pub fn is_busy(&self) -> bool {
        self.busy
    }

    /// The peer closed the connection completely (POLLHUP): nothing sent
    /// to it can arrive any more.
    pub fn mark_hangup(&mut self) {
        self.hangup = true;
    }

    /// Peer gone (or refused), nothing left to answer or send.
    pub fn is_finished(&self) -> bool {
        self.broken
            || self.hangup
            || (self.read_closed
                && !self.busy
                && self.outbuf.is_empty()
                && !self.inbuf.contains(&b'\n'))
    }

    /// Reads what the socket has.
    pub fn read_some(&mut self) {
        let mut buf = [0u8; 16 * 1024];
        for _ in 0..64 {
            match self.stream.read(&mut buf) {
                Ok(0) => {
                    self.read_closed = true;
                    return;
                }
                Ok(n) => self.inbuf.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => {
                    self.broken = true;
                    return;
                }
            }
        }
    }

    /// The next complete request line, unless a deferred answer is pending.
    pub fn next_line(&mut self) -> Option<Line> {
        if self.busy || self.broken {
            return None;
        }
        match self.inbuf.iter().position(|&b| b == b'\n') {
            Some(i) => {
                let mut line: Vec<u8> = self.inbuf.drain(..=i).collect();
                line.pop();
                Some(Line::Request(line))
            }
            None if self.inbuf.len() > MAX_REQUEST_LINE => {
                self.inbuf.clear();
                self.read_closed = true;
                Some(Line::TooLong)
            }
            None => None,
        }
    }

    /// Queues a response line and tries to send it.
    pub fn send(&mut self, response: &Response) {
        match serde_json::to_vec(response) {
            Ok(mut line) => {
                line.push(b'\n');
                self.outbuf.extend_from_slice(&line);
            }
            Err(err) => tracing::error!(%err, "cannot serialize a response"),
        }
        self.flush();
    }

    /// Queues a response line that carries `fds` (SCM_RIGHTS) with its
    /// first byte. Only one such line may be queued at a time; the fds are
    /// closed here once sent.
    pub fn send_with_fds(&mut self, response: &Response, fds: Vec<OwnedFd>) {
        if self.fds_at.is_some() {
            tracing::error!("fds already queued on this connection; refusing more");
            self.broken = true;
            return;
        }
        self.fds_at = Some((self.outbuf.len(), fds));
        self.send(response);
    }

    /// Sends what the socket takes without blocking.
    pub fn flush(&mut self) {
        while !self.outbuf.is_empty() && !self.broken {
            let sent = match &self.fds_at {
                Some((0, fds)) => send_fds(&self.stream, &self.outbuf, fds),
                Some((at, _)) => self.stream.write(&self.outbuf[..*at]),
                None => self.stream.write(&self.outbuf),
            };
            match sent {
                Ok(0) => self.broken = true,
                Ok(n) => {
                    self.outbuf.drain(..n);
                    self.fds_at = match self.fds_at.take() {
                        // sent with this write: ours are closed now
                        Some((0, _)) => None,
                        Some((at, fds)) => Some((at - n, fds)),
                        None => None,
                    };
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => self.broken = true,
            }
        }
    }

    /// Sends everything, waiting up to `timeout` (used right before exit).
    pub fn flush_blocking(&mut self, timeout: std::time::Duration) {
        if self.stream.set_nonblocking(false).is_err()
            || self.stream.set_write_timeout(Some(timeout)).is_err()
        {
            return;
        }
        if self.stream.write_all(&self.outbuf).is_ok() {
            self.outbuf.clear();
        }
    }
}

/// One `sendmsg` of (a prefix of) `data` with `fds` attached.
fn send_fds(stream: &UnixStream, data: &[u8], fds: &[OwnedFd]) -> io::Result<usize> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
    let iov = [IoSlice::new(data)];
    let cmsgs = [ControlMessage::ScmRights(&raw)];
    let cmsgs: &[ControlMessage<'_>] = if raw.is_empty() { &[] } else { &cmsgs };
    sendmsg::<()>(
        stream.as_raw_fd(),
        &iov,
        cmsgs,
        MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL,
        None,
    )
    .map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_shim_api::protocol::ErrorCode;

    fn pair() -> (Conn, UnixStream) {
        let (a, b) = UnixStream::pair().expect("pair");
        (Conn::new(a).expect("conn"), b)
    }

    #[test]
    fn splits_lines_and_holds_them_while_busy() {
        let (mut c, mut peer) = pair();
        peer.write_all(b"{\"op\":\"state\"}\n{\"op\":\"st")
            .expect("write");
        c.read_some();
        assert_eq!(
            c.next_line(),
            Some(Line::Request(b"{\"op\":\"state\"}".to_vec()))
        );
        assert_eq!(c.next_line(), None);
        peer.write_all(b"art\"}\n").expect("write");
        c.read_some();
        c.set_busy(true);
        assert_eq!(c.next_line(), None);
        assert!(!c.wants_read());
        c.set_busy(false);
        assert_eq!(
            c.next_line(),
            Some(Line::Request(b"{\"op\":\"start\"}".to_vec()))
        );
    }

    #[test]
    fn responses_are_lines() {
        let (mut c, peer) = pair();
        c.send(&Response::Ok);
        c.send(&Response::error(ErrorCode::BadRequest, "x"));
        assert!(!c.wants_write());
        let mut text = String::new();
        drop(c);
        let mut peer = peer;
        peer.read_to_string(&mut text).expect("read");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], r#"{"result":"ok"}"#);
        assert!(lines[1].contains("bad_request"));
    }

    #[test]
    fn fds_travel_with_their_line() {
        use berth_shim_api::client::read_line_with_fds;
        let (mut c, peer) = pair();
        c.send(&Response::Ok);
        let (r, w) = nix::unistd::pipe().expect("pipe");
        c.send_with_fds(&Response::Exited { exit_code: 1 }, vec![w]);
        c.send(&Response::Ok);
        assert!(!c.wants_write());
        let mut leftover = Vec::new();
        let (line, fds) = read_line_with_fds(&peer, &mut leftover).expect("line 1");
        assert_eq!(line, br#"{"result":"ok"}"#);
        let mut fds = fds;
        if fds.is_empty() {
            let (line, more) = read_line_with_fds(&peer, &mut leftover).expect("line 2");
            assert_eq!(line, br#"{"result":"exited","exit_code":1}"#);
            fds = more;
        }
        assert_eq!(fds.len(), 1, "the pipe's write end arrived");
        // the write end we got is the pipe's: what we write, r reads
        let mut w = std::fs::File::from(fds.pop().expect("fd"));
        w.write_all(b"x").expect("write");
        let mut r = std::fs::File::from(r);
        let mut b = [0u8; 1];
        r.read_exact(&mut b).expect("read");
        assert_eq!(&b, b"x");
    }

    #[test]
    fn eof_finishes_after_answers() {
        let (mut c, mut peer) = pair();
        peer.write_all(b"{}\n").expect("write");
        drop(peer);
        c.read_some();
        assert!(!c.is_finished(), "a line is still to answer");
        assert!(c.next_line().is_some());
        assert!(c.is_finished());
    }

    #[test]
    fn overlong_line_is_refused() {
        let (mut c, mut peer) = pair();
        let junk = vec![b'x'; MAX_REQUEST_LINE + 1];
        std::thread::spawn(move || {
            let _ = peer.write_all(&junk);
        });
        let mut got = None;
        for _ in 0..1000 {
            c.read_some();
            got = c.next_line();
            if got.is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(got, Some(Line::TooLong));
    }
}
