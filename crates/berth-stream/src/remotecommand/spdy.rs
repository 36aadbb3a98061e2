//! remotecommand over SPDY: the client opens one SPDY stream per channel,
//! named by its `streamType` header; the server waits for the expected set.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use super::{resize, run, Target};
use crate::spdy::{Role, Session, SessionConfig, Stream};
use crate::{SessionStreams, StreamRuntime};

/// The SPDY remotecommand versions, newest first (server preference).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Version {
    /// `channel.k8s.io`: no resize stream, text errors.
    V1,
    /// `v2.channel.k8s.io`: as v1, without v1's quirks.
    V2,
    /// `v3.channel.k8s.io`: adds the resize stream.
    V3,
    /// `v4.channel.k8s.io`: errors as JSON `Status` with the exit code.
    V4,
}

pub const PROTOCOLS: [(&str, Version); 4] = [
    ("v4.channel.k8s.io", Version::V4),
    ("v3.channel.k8s.io", Version::V3),
    ("v2.channel.k8s.io", Version::V2),
    ("channel.k8s.io", Version::V1),
];

pub fn version_of(protocol: &str) -> Option<Version> {
    PROTOCOLS
        .iter()
        .find(|(name, _)| *name == protocol)
        .map(|(_, v)| *v)
}

#[derive(Debug, Clone)]
pub struct Timeouts {
    pub idle: Duration,
    pub stream_creation: Duration,
    /// How long the end of a session may take to drain.
    pub grace: Duration,
}

#[derive(Default)]
struct Channels {
    error: Option<Stream>,
    stdin: Option<Stream>,
    stdout: Option<Stream>,
    stderr: Option<Stream>,
    resize: Option<Stream>,
}

impl Channels {
    fn count(&self) -> usize {
        [
            &self.error,
            &self.stdin,
            &self.stdout,
            &self.stderr,
            &self.resize,
        ]
        .iter()
        .filter(|s| s.is_some())
        .count()
    }
}

/// Serves one upgraded connection.
pub async fn serve<R, T>(
    io: T,
    version: Version,
    target: Target,
    runtime: Arc<R>,
    timeouts: Timeouts,
) where
    R: StreamRuntime,
    T: AsyncRead + AsyncWrite + Send + 'static,
{
    let opts = target.options();
    let (session, mut incoming) = Session::start(
        io,
        Role::Server,
        SessionConfig {
            idle_timeout: timeouts.idle,
        },
    );
    let resize_wanted = opts.tty && version >= Version::V3;
    let expected = 1
        + usize::from(opts.stdin)
        + usize::from(opts.stdout)
        + usize::from(opts.stderr)
        + usize::from(resize_wanted);

    let mut ch = Channels::default();
    let mut extra = Vec::new();
    let wait = async {
        while ch.count() < expected {
            let Some(stream) = incoming.recv().await else {
                return false;
            };
            let slot = match stream.headers.get("streamtype") {
                Some("error") => &mut ch.error,
                Some("stdin") => &mut ch.stdin,
                Some("stdout") => &mut ch.stdout,
                Some("stderr") => &mut ch.stderr,
                Some("resize") => &mut ch.resize,
                other => {
                    tracing::debug!(stream_type = ?other, "unexpected remotecommand stream type");
                    extra.push(stream);
                    continue;
                }
            };
            if let Some(old) = slot.replace(stream) {
                extra.push(old);
            }
        }
        true
    };
    match tokio::time::timeout(timeouts.stream_creation, wait).await {
        Ok(true) => {}
        Ok(false) => return,
        Err(_) => {
            tracing::debug!("timed out waiting for client to create streams");
            // Our halves close (FLAG_FIN) before the GOAWAY.
            drop(ch);
            drop(extra);
            session.shutdown(timeouts.grace).await;
            return;
        }
    }

    // Halves nobody uses stay open until the end, as kubelet leaves them.
    let mut keep: Vec<Box<dyn Send>> = Vec::new();
    let split = |s: Option<Stream>| s.map(|s| (s.reader, s.writer));
    let stdin = split(ch.stdin.take()).map(|(r, w)| {
        keep.push(Box::new(w));
        r
    });
    let stdout = split(ch.stdout.take()).map(|(r, w)| {
        keep.push(Box::new(r));
        w
    });
    let stderr = split(ch.stderr.take()).map(|(r, w)| {
        keep.push(Box::new(r));
        w
    });
    let error = split(ch.error.take()).map(|(r, w)| {
        keep.push(Box::new(r));
        w
    });
    let resize = match split(ch.resize.take()) {
        Some((r, w)) if resize_wanted => {
            keep.push(Box::new(w));
            let (tx, rx) = mpsc::channel(16);
            tokio::spawn(resize::forward(r, tx));
            Some(rx)
        }
        _ => None,
    };
    let streams = SessionStreams {
        stdin: stdin.map(|r| Box::new(r) as _),
        stdout: stdout.map(|w| Box::new(w) as _),
        stderr: stderr.map(|w| Box::new(w) as _),
        resize,
    };
    let outcome = run(&*runtime, &target, streams, session.closed()).await;
    let Some(outcome) = outcome else {
        // The client went away; the runtime's future is gone with it.
        return;
    };
    if let Some(mut error) = error {
        let payload = match version {
            Version::V4 => Some(outcome.v4_json()),
            _ => outcome.v1_text(),
        };
        if let Some(payload) = payload {
            let _ = error.write_all(payload.as_bytes()).await;
        }
        let _ = error.shutdown().await;
    }
    drop(keep);
    drop(extra);
    session.shutdown(timeouts.grace).await;
}
