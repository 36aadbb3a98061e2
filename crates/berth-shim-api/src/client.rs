//! A small blocking client for the control socket (tests, tools; berthd may
//! use it from a blocking task or speak the protocol itself).

use std::io::{self, BufRead, BufReader, IoSliceMut, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use crate::protocol::{Request, Response, SessionFd, SessionRequest};

pub struct Client {
    reader: BufReader<UnixStream>,
}

impl Client {
    /// `timeout` bounds each read and write (None: wait forever).
    pub fn connect(socket: &Path, timeout: Option<Duration>) -> io::Result<Self> {
        let stream = UnixStream::connect(socket)?;
        stream.set_read_timeout(timeout)?;
        stream.set_write_timeout(timeout)?;
        Ok(Self {
            reader: BufReader::new(stream),
        })
    }

    /// Sends one request and reads its response.
    pub fn call(&mut self, request: &Request) -> io::Result<Response> {
        let mut line = serde_json::to_vec(request).map_err(io::Error::other)?;
        line.push(b'\n');
        self.reader.get_mut().write_all(&line)?;
        let mut answer = String::new();
        if self.reader.read_line(&mut answer)? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "shim closed the connection",
            ));
        }
        serde_json::from_str(&answer).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }
}

/// One request on a fresh connection.
pub fn call(socket: &Path, request: &Request, timeout: Option<Duration>) -> io::Result<Response> {
    Client::connect(socket, timeout)?.call(request)
}

/// A started interactive exec session: the connection (close it to kill
/// the process) and the process's stdio ends.
#[derive(Debug)]
pub struct Session {
    pub stream: UnixStream,
    pub pid: i32,
    pub fds: Vec<(SessionFd, OwnedFd)>,
    /// Bytes read past the `session` line (the `exited` line may follow
    /// right away).
    pub leftover: Vec<u8>,
}

/// Why a session did not start.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The shim refused (not running, bad request, exec failed).
    #[error("{message}")]
    Refused {
        code: crate::protocol::ErrorCode,
        message: String,
    },
}

/// Asks the shim at `socket` for a session and receives its fds.
pub fn open_session(
    socket: &Path,
    request: &SessionRequest,
    timeout: Option<Duration>,
) -> Result<Session, SessionError> {
    let mut stream = UnixStream::connect(socket)?;
    stream.set_read_timeout(timeout)?;
    stream.set_write_timeout(timeout)?;
    let mut line =
        serde_json::to_vec(&Request::Session(request.clone())).map_err(io::Error::other)?;
    line.push(b'\n');
    stream.write_all(&line)?;
    let mut leftover = Vec::new();
    let (answer, fds) = read_line_with_fds(&stream, &mut leftover)?;
    let response: Response = serde_json::from_slice(&answer)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    match response {
        Response::Session { pid, fds: names } => {
            if names.len() != fds.len() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("shim named {} fds but sent {}", names.len(), fds.len()),
                )
                .into());
            }
            stream.set_read_timeout(None)?;
            stream.set_write_timeout(None)?;
            Ok(Session {
                stream,
                pid,
                fds: names.into_iter().zip(fds).collect(),
                leftover,
            })
        }
        Response::Error { code, message } => Err(SessionError::Refused { code, message }),
        other => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("unexpected answer to session: {other:?}"),
        )
        .into()),
    }
}

impl Session {
    /// The fd of one stream, taken out of the session.
    pub fn take(&mut self, which: SessionFd) -> Option<OwnedFd> {
        let i = self.fds.iter().position(|(w, _)| *w == which)?;
        Some(self.fds.remove(i).1)
    }

    /// Blocks until the process exited; its exit code.
    pub fn wait_exit(&mut self) -> io::Result<i32> {
        let (line, _) = read_line_with_fds(&self.stream, &mut self.leftover)?;
        parse_exited(&line)
    }
}

/// The exit code from an `exited` line.
pub fn parse_exited(line: &[u8]) -> io::Result<i32> {
    match serde_json::from_slice(line) {
        Ok(Response::Exited { exit_code }) => Ok(exit_code),
        Ok(other) => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("expected exited, got {other:?}"),
        )),
        Err(e) => Err(io::Error::new(io::ErrorKind::InvalidData, e)),
    }
}

/// Reads one line (without its newline) and any fds that came with it;
/// bytes past the line stay in `leftover` for the next call.
pub fn read_line_with_fds(
    stream: &UnixStream,
    leftover: &mut Vec<u8>,
) -> io::Result<(Vec<u8>, Vec<OwnedFd>)> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    let mut fds = Vec::new();
    loop {
        if let Some(i) = leftover.iter().position(|&b| b == b'\n') {
            let mut line: Vec<u8> = leftover.drain(..=i).collect();
            line.pop();
            return Ok((line, fds));
        }
        let mut buf = [0u8; 4096];
        let mut cmsg = nix::cmsg_space!([RawFd; 8]);
        let (n, got) = {
            let mut iov = [IoSliceMut::new(&mut buf)];
            let msg = loop {
                match recvmsg::<()>(
                    stream.as_raw_fd(),
                    &mut iov,
                    Some(&mut cmsg),
                    MsgFlags::MSG_CMSG_CLOEXEC,
                ) {
                    Err(nix::errno::Errno::EINTR) => continue,
                    other => break other.map_err(io::Error::from)?,
                }
            };
            let mut got = Vec::new();
            for c in msg.cmsgs().map_err(io::Error::from)? {
                if let ControlMessageOwned::ScmRights(raw) = c {
                    // SAFETY: the kernel just installed these fds for us.
                    got.extend(
                        raw.into_iter()
                            .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                    );
                }
            }
            (msg.bytes, got)
        };
        fds.extend(got);
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "shim closed the connection",
            ));
        }
        leftover.extend_from_slice(&buf[..n]);
    }
}
