//! The contract between the streaming server and the runtime behind it.

use std::future::Future;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

pub type BoxedReader = Box<dyn AsyncRead + Send + Unpin>;
pub type BoxedWriter = Box<dyn AsyncWrite + Send + Unpin>;

/// A terminal size from the client's resize channel, in character cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TerminalSize {
    pub width: u16,
    pub height: u16,
}

/// The client's side of one exec or attach session. A stream the client did
/// not ask for is `None`. With a tty there is no stderr (the terminal
/// merges it into stdout), and `resize` carries the client's size changes;
/// the first size usually arrives right after the session starts.
pub struct SessionStreams {
    /// Ends (reads 0 bytes) when the client closes its stdin.
    pub stdin: Option<BoxedReader>,
    pub stdout: Option<BoxedWriter>,
    pub stderr: Option<BoxedWriter>,
    pub resize: Option<mpsc::Receiver<TerminalSize>>,
}

/// What the client asked to run (from the CRI `ExecRequest`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecSpec {
    pub container_id: String,
    pub cmd: Vec<String>,
    pub tty: bool,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
}

/// Which container's stdio to attach to (from the CRI `AttachRequest`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachSpec {
    pub container_id: String,
    pub tty: bool,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
}

/// Why a session could not run. The server reports it to the client on the
/// error channel (as a v4 `Status` where the protocol has one).
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("container {0:?} not found")]
    ContainerNotFound(String),
    #[error("pod sandbox {0:?} not found")]
    SandboxNotFound(String),
    #[error("container {0:?} is not running")]
    NotRunning(String),
    #[error("{0}")]
    Failed(String),
}

/// The runtime behind the streaming server.
///
/// Cancellation is part of the contract: when the client goes away the
/// server drops the future returned by [`StreamRuntime::exec`] or
/// [`StreamRuntime::attach`]. Dropping an exec future must kill the exec'd
/// process; dropping an attach future only detaches (the container keeps
/// running). The process ending, in turn, ends the future, and the server
/// then closes the client's streams.
pub trait StreamRuntime: Send + Sync + 'static {
    /// Runs `spec.cmd` in the container with the given streams and resolves
    /// to its exit code (128+signal when killed by a signal) once it exited
    /// and its output has been written to `streams`.
    fn exec(
        &self,
        spec: ExecSpec,
        streams: SessionStreams,
    ) -> impl Future<Output = Result<i32, SessionError>> + Send;

    /// Connects `streams` to the running container's stdio and resolves when
    /// the container exits, or, as with containerd, when the client's stdin
    /// ends (the client detached). One exception: a container without a tty
    /// whose config has `stdin_once` gets its stdin closed then, and the
    /// session lasts until it exits, so the client sees the output that
    /// follows. A client's stdin for a container created without stdin is
    /// ignored.
    fn attach(
        &self,
        spec: AttachSpec,
        streams: SessionStreams,
    ) -> impl Future<Output = Result<(), SessionError>> + Send;

    /// A TCP connection to `localhost:port` inside the pod's network
    /// namespace (IPv4 first, then IPv6).
    fn port_forward(
        &self,
        pod_sandbox_id: &str,
        port: u16,
    ) -> impl Future<Output = Result<TcpStream, SessionError>> + Send;
}
