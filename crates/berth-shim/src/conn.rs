//! One client connection to the control socket: JSON lines in, JSON lines
//! out, non-blocking on both sides. While a request waits for a deferred
//! answer (exec, shutdown) the connection reads no further requests, so
//! answers stay in request order.

use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;

use crate::protocol::Response;

/// A request line longer than this is refused and the connection closed.
pub const MAX_REQUEST_LINE: usize = 1024 * 1024;

#[derive(Debug)]
pub struct Conn {
    stream: UnixStream,
    inbuf: Vec<u8>,
    outbuf: Vec<u8>,
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

    /// Sends what the socket takes without blocking.
    pub fn flush(&mut self) {
        while !self.outbuf.is_empty() && !self.broken {
            match self.stream.write(&self.outbuf) {
                Ok(0) => self.broken = true,
                Ok(n) => {
                    self.outbuf.drain(..n);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ErrorCode;

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
