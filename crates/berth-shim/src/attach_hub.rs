//! Serving `attach.sock`: any number of attachers receive the container's
//! output and may write to its stdin and resize its terminal.
//!
//! Output reaches attachers only as a copy of what goes to the CRI log: the
//! log is written first, and an attacher whose unsent output grows beyond
//! [`MAX_PENDING_OUTPUT`] is disconnected, so a slow or vanished attacher
//! never holds the container or its log back. Stdin from attachers is
//! buffered up to [`MAX_PENDING_STDIN`]; while the container does not read
//! it, attachers are not read either (their writes wait, the container does
//! not). Detaching never signals the container.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};

use nix::poll::PollFlags;

use berth_shim_api::attach::{encode, encode_output, Decoder, Frame, Stream};
use berth_shim_api::pty::set_window_size;

/// Unsent output per attacher before it is dropped (a client that reads
/// nothing for this long is not keeping up).
pub const MAX_PENDING_OUTPUT: usize = 4 * 1024 * 1024;

/// Stdin bytes accepted from attachers and not yet taken by the container.
pub const MAX_PENDING_STDIN: usize = 256 * 1024;

/// The container's stdin as the shim holds it.
pub struct ContainerStdin {
    /// The write end of its stdin pipe, or a copy of its pty master;
    /// non-blocking.
    pub fd: OwnedFd,
    /// Close it after the first attacher's stdin ended.
    pub once: bool,
}

#[derive(Debug)]
struct Attacher {
    stream: UnixStream,
    decoder: Decoder,
    outbuf: Vec<u8>,
    /// Sent a stdin frame: its end counts for `stdin_once`.
    uses_stdin: bool,
    stdin_closed: bool,
    read_closed: bool,
    /// Flush what is queued, then close (after the exit frame).
    closing: bool,
    broken: bool,
}

impl Attacher {
    fn new(stream: UnixStream) -> Self {
        Self {
            stream,
            decoder: Decoder::new(),
            outbuf: Vec::new(),
            uses_stdin: false,
            stdin_closed: false,
            read_closed: false,
            closing: false,
            broken: false,
        }
    }

    fn flush(&mut self) {
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

    fn finished(&self) -> bool {
        self.broken || (self.closing && self.outbuf.is_empty()) || self.read_closed && self.closing
    }
}

/// What poll should watch for the hub.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachToken {
    Listener,
    Attacher(u64),
    Stdin,
}

pub struct AttachHub {
    listener: UnixListener,
    attachers: BTreeMap<u64, Attacher>,
    next_id: u64,
    stdin: Option<File>,
    stdin_once: bool,
    stdin_buf: Vec<u8>,
    /// Close stdin once `stdin_buf` is written.
    stdin_closing: bool,
    /// The pty master of a tty container, for resizes.
    pty: Option<OwnedFd>,
    exit_code: Option<i32>,
}

impl AttachHub {
    /// `listener` must be non-blocking.
    pub fn new(
        listener: UnixListener,
        stdin: Option<ContainerStdin>,
        pty: Option<OwnedFd>,
    ) -> Self {
        let stdin_once = stdin.as_ref().is_some_and(|s| s.once);
        Self {
            listener,
            attachers: BTreeMap::new(),
            next_id: 0,
            stdin: stdin.map(|s| File::from(s.fd)),
            stdin_once,
            stdin_buf: Vec::new(),
            stdin_closing: false,
            pty,
            exit_code: None,
        }
    }

    pub fn attacher_count(&self) -> usize {
        self.attachers.len()
    }

    /// Descriptors to poll and their events.
    pub fn poll_entries(&self) -> Vec<(AttachToken, BorrowedFd<'_>, PollFlags)> {
        let mut v = vec![(
            AttachToken::Listener,
            self.listener.as_fd(),
            PollFlags::POLLIN,
        )];
        let stdin_room = self.stdin_buf.len() < MAX_PENDING_STDIN;
        for (id, a) in &self.attachers {
            let mut ev = PollFlags::empty();
            if !a.read_closed && stdin_room {
                ev |= PollFlags::POLLIN;
            }
            if !a.outbuf.is_empty() {
                ev |= PollFlags::POLLOUT;
            }
            v.push((AttachToken::Attacher(*id), a.stream.as_fd(), ev));
        }
        if let Some(f) = &self.stdin {
            if !self.stdin_buf.is_empty() {
                v.push((AttachToken::Stdin, f.as_fd(), PollFlags::POLLOUT));
            }
        }
        v
    }

    pub fn dispatch(&mut self, token: AttachToken, revents: PollFlags) {
        match token {
            AttachToken::Listener => self.accept(),
            AttachToken::Attacher(id) => self.on_attacher(id, revents),
            AttachToken::Stdin => self.write_stdin(),
        }
        self.drop_finished();
    }

    fn accept(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    if let Err(err) = stream.set_nonblocking(true) {
                        tracing::warn!(%err, "attach socket");
                        continue;
                    }
                    let mut a = Attacher::new(stream);
                    if let Some(code) = self.exit_code {
                        encode(&Frame::Exited(code), &mut a.outbuf);
                        a.closing = true;
                        a.flush();
                    }
                    tracing::debug!(id = self.next_id, "attacher connected");
                    self.attachers.insert(self.next_id, a);
                    self.next_id += 1;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(err) => {
                    tracing::warn!(%err, "attach accept failed");
                    return;
                }
            }
        }
    }

    fn on_attacher(&mut self, id: u64, revents: PollFlags) {
        let Some(a) = self.attachers.get_mut(&id) else {
            return;
        };
        if revents.intersects(PollFlags::POLLOUT) {
            a.flush();
        }
        if revents.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR) {
            self.read_attacher(id);
        }
    }

    fn read_attacher(&mut self, id: u64) {
        let mut buf = [0u8; 16 * 1024];
        let mut frames = Vec::new();
        let mut ended = false;
        if let Some(a) = self.attachers.get_mut(&id) {
            // bounded: one attacher cannot keep the loop here
            for _ in 0..16 {
                match a.stream.read(&mut buf) {
                    Ok(0) => {
                        a.read_closed = true;
                        ended = true;
                        break;
                    }
                    Ok(n) => a.decoder.push(&buf[..n]),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(_) => {
                        a.broken = true;
                        ended = true;
                        break;
                    }
                }
            }
            loop {
                match a.decoder.next_frame() {
                    Ok(Some(f)) => frames.push(f),
                    Ok(None) => break,
                    Err(err) => {
                        tracing::warn!(%err, "attacher sent a bad frame; disconnecting it");
                        a.broken = true;
                        ended = true;
                        break;
                    }
                }
            }
        }
        for f in frames {
            self.on_frame(id, f);
        }
        if ended {
            // a vanished attacher's stdin has ended too
            let counts = self
                .attachers
                .get(&id)
                .is_some_and(|a| a.uses_stdin && !a.stdin_closed);
            if counts {
                self.stdin_ended(id);
            }
            if let Some(a) = self.attachers.get_mut(&id) {
                a.closing = true;
            }
        }
    }

    fn on_frame(&mut self, id: u64, frame: Frame) {
        match frame {
            Frame::Stdin(data) => {
                let Some(a) = self.attachers.get_mut(&id) else {
                    return;
                };
                if a.stdin_closed {
                    return;
                }
                a.uses_stdin = true;
                if self.stdin.is_some() && !self.stdin_closing {
                    self.stdin_buf.extend_from_slice(&data);
                    self.write_stdin();
                }
            }
            Frame::StdinClose => self.stdin_ended(id),
            Frame::Resize { width, height } => {
                if let Some(pty) = &self.pty {
                    if let Err(err) = set_window_size(pty.as_fd(), width, height) {
                        tracing::warn!(%err, "resizing the container's terminal");
                    }
                }
            }
            Frame::Stdout(_) | Frame::Stderr(_) | Frame::Exited(_) => {
                tracing::debug!("attacher sent an output frame; ignored");
            }
        }
    }

    fn stdin_ended(&mut self, id: u64) {
        let Some(a) = self.attachers.get_mut(&id) else {
            return;
        };
        if a.stdin_closed {
            return;
        }
        a.stdin_closed = true;
        a.uses_stdin = true;
        if self.stdin_once && self.stdin.is_some() && !self.stdin_closing {
            tracing::info!(
                "stdin_once: the first attacher's stdin ended; closing the container's stdin"
            );
            self.stdin_closing = true;
            self.write_stdin();
        }
    }

    /// Writes buffered stdin; closes stdin when asked to and drained.
    fn write_stdin(&mut self) {
        let Some(f) = &mut self.stdin else {
            self.stdin_buf.clear();
            return;
        };
        while !self.stdin_buf.is_empty() {
            match f.write(&self.stdin_buf) {
                Ok(n) => {
                    self.stdin_buf.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(err) => {
                    // EPIPE: the container closed its stdin
                    tracing::info!(%err, "the container's stdin is gone");
                    self.stdin = None;
                    self.stdin_buf.clear();
                    return;
                }
            }
        }
        if self.stdin_closing {
            self.stdin = None;
        }
    }

    /// Sends output to every attacher, dropping those too far behind.
    pub fn broadcast(&mut self, stream: Stream, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        for (id, a) in &mut self.attachers {
            if a.closing || a.broken {
                continue;
            }
            encode_output(stream, data, &mut a.outbuf);
            a.flush();
            if a.outbuf.len() > MAX_PENDING_OUTPUT {
                tracing::warn!(id, "attacher is not reading its output; disconnecting it");
                a.broken = true;
            }
        }
        self.drop_finished();
    }

    /// The container stopped: every attacher gets the exit frame and is
    /// closed once it has it; the container's stdin is closed.
    pub fn container_exited(&mut self, exit_code: i32) {
        if self.exit_code.is_some() {
            return;
        }
        self.exit_code = Some(exit_code);
        self.stdin = None;
        self.stdin_buf.clear();
        for a in self.attachers.values_mut() {
            encode(&Frame::Exited(exit_code), &mut a.outbuf);
            a.closing = true;
            a.flush();
        }
        self.drop_finished();
    }

    fn drop_finished(&mut self) {
        self.attachers.retain(|id, a| {
            let keep = !a.finished();
            if !keep {
                tracing::debug!(id, "attacher gone");
            }
            keep
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_shim_api::attach::Decoder;
    use std::path::Path;

    fn hub(dir: &Path, stdin: Option<ContainerStdin>) -> AttachHub {
        let listener = UnixListener::bind(dir.join("attach.sock")).expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        AttachHub::new(listener, stdin, None)
    }

    fn attach(hub: &mut AttachHub, dir: &Path) -> UnixStream {
        let s = UnixStream::connect(dir.join("attach.sock")).expect("connect");
        hub.dispatch(AttachToken::Listener, PollFlags::POLLIN);
        s
    }

    fn send(s: &mut UnixStream, frame: Frame) {
        let mut out = Vec::new();
        encode(&frame, &mut out);
        s.write_all(&out).expect("send");
    }

    /// Lets the hub read every attacher.
    fn pump(hub: &mut AttachHub) {
        let ids: Vec<u64> = hub.attachers.keys().copied().collect();
        for id in ids {
            hub.dispatch(AttachToken::Attacher(id), PollFlags::POLLIN);
        }
    }

    #[test]
    fn output_then_the_exit_then_the_end() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut hub = hub(dir.path(), None);
        let mut a = attach(&mut hub, dir.path());
        let mut b = attach(&mut hub, dir.path());
        hub.broadcast(Stream::Stdout, b"out");
        hub.broadcast(Stream::Stderr, b"err");
        hub.container_exited(3);
        assert_eq!(hub.attacher_count(), 0, "flushed and closed");
        for s in [&mut a, &mut b] {
            let mut wire = Vec::new();
            s.read_to_end(&mut wire).expect("read to the end");
            let mut d = Decoder::new();
            d.push(&wire);
            let mut frames = Vec::new();
            while let Some(f) = d.next_frame().expect("frame") {
                frames.push(f);
            }
            assert_eq!(
                frames,
                [
                    Frame::Stdout(b"out".to_vec()),
                    Frame::Stderr(b"err".to_vec()),
                    Frame::Exited(3)
                ]
            );
        }
    }

    #[test]
    fn an_attacher_too_far_behind_is_dropped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut hub = hub(dir.path(), None);
        let _stuck = attach(&mut hub, dir.path());
        assert_eq!(hub.attacher_count(), 1);
        let chunk = vec![b'x'; 64 * 1024];
        for _ in 0..(2 * MAX_PENDING_OUTPUT / chunk.len()) {
            hub.broadcast(Stream::Stdout, &chunk);
        }
        assert_eq!(hub.attacher_count(), 0);
    }

    #[test]
    fn stdin_once_closes_after_the_first_stdin_ends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (r, w) = nix::unistd::pipe().expect("pipe");
        let mut hub = hub(dir.path(), Some(ContainerStdin { fd: w, once: true }));
        let mut a = attach(&mut hub, dir.path());
        let mut b = attach(&mut hub, dir.path());
        send(&mut a, Frame::Stdin(b"one ".to_vec()));
        send(&mut b, Frame::Stdin(b"two ".to_vec()));
        pump(&mut hub);
        send(&mut a, Frame::StdinClose);
        pump(&mut hub);
        // after the close nothing more reaches the container
        send(&mut b, Frame::Stdin(b"three".to_vec()));
        pump(&mut hub);
        let mut got = String::new();
        File::from(r).read_to_string(&mut got).expect("read to EOF");
        assert_eq!(got, "one two ");
        // detaching from stdin_once never touched the attachers
        assert_eq!(hub.attacher_count(), 2);
    }

    #[test]
    fn without_stdin_once_stdin_outlives_its_attachers() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (r, w) = nix::unistd::pipe().expect("pipe");
        let mut hub = hub(dir.path(), Some(ContainerStdin { fd: w, once: false }));
        let mut a = attach(&mut hub, dir.path());
        send(&mut a, Frame::Stdin(b"one ".to_vec()));
        send(&mut a, Frame::StdinClose);
        drop(a);
        pump(&mut hub);
        assert_eq!(hub.attacher_count(), 0);
        let mut b = attach(&mut hub, dir.path());
        send(&mut b, Frame::Stdin(b"two".to_vec()));
        pump(&mut hub);
        hub.container_exited(0);
        let mut got = String::new();
        File::from(r).read_to_string(&mut got).expect("read to EOF");
        assert_eq!(got, "one two");
    }
}
