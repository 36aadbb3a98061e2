//! The Kubernetes remotecommand protocols (exec and attach): which streams
//! a session has, and how its end is reported. The transports are in
//! [`spdy`] and [`websocket`].

pub mod resize;
pub mod spdy;
pub mod status;
pub mod websocket;

use std::future::Future;

use crate::{AttachSpec, ExecSpec, SessionError, SessionStreams, StreamRuntime};
use status::Outcome;

/// What a session runs.
#[derive(Debug, Clone)]
pub enum Target {
    Exec(ExecSpec),
    Attach(AttachSpec),
}

/// The streams a session carries, from the cached CRI request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

impl Target {
    pub fn options(&self) -> Options {
        let (stdin, stdout, stderr, tty) = match self {
            Target::Exec(s) => (s.stdin, s.stdout, s.stderr, s.tty),
            Target::Attach(s) => (s.stdin, s.stdout, s.stderr, s.tty),
        };
        // A terminal has no separate stderr; kubelet drops it the same way.
        Options {
            stdin,
            stdout,
            stderr: stderr && !tty,
            tty,
        }
    }
}

fn error_outcome(e: SessionError) -> Outcome {
    Outcome::Error(e.to_string())
}

/// Runs the session on the runtime. `None` when `client_gone` resolved
/// first: the runtime's future is then dropped, which kills an exec'd
/// process (and only detaches an attach).
pub async fn run<R: StreamRuntime>(
    runtime: &R,
    target: &Target,
    streams: SessionStreams,
    client_gone: impl Future<Output = ()>,
) -> Option<Outcome> {
    match target {
        Target::Exec(spec) => {
            let exec = runtime.exec(spec.clone(), streams);
            tokio::select! {
                result = exec => Some(match result {
                    Ok(0) => Outcome::Success,
                    Ok(code) => Outcome::ExitCode { code, cmd: spec.cmd.clone() },
                    Err(e) => error_outcome(e),
                }),
                _ = client_gone => None,
            }
        }
        Target::Attach(spec) => {
            let attach = runtime.attach(spec.clone(), streams);
            tokio::select! {
                result = attach => Some(match result {
                    Ok(()) => Outcome::Success,
                    Err(e) => error_outcome(e),
                }),
                _ = client_gone => None,
            }
        }
    }
}
