//! A small blocking client for the control socket (tests, tools; berthd may
//! use it from a blocking task or speak the protocol itself).

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use crate::protocol::{Request, Response};

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
