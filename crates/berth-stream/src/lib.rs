//! The streaming server behind the CRI `Exec`, `Attach` and `PortForward`
//! RPCs. The runtime answers those RPCs with a URL on this server; the
//! client (kubelet, crictl, critest) then speaks the Kubernetes
//! remotecommand or portforward protocol to it, over SPDY/3.1 or WebSocket.
//!
//! The server knows nothing about containers: it calls a [`StreamRuntime`]
//! for the processes and connections behind each session.
//!
//! Layers, bottom up: [`spdy`] (frames, header compression, sessions),
//! [`ws_tunnel`] (SPDY inside WebSocket), [`remotecommand`] and
//! [`portforward`] (the Kubernetes protocols), [`tokens`] and [`server`]
//! (URLs, HTTP and the upgrades).
//!
//! ```no_run
//! # async fn demo<R: berth_stream::StreamRuntime>(runtime: std::sync::Arc<R>) -> std::io::Result<()> {
//! use berth_stream::{ExecSpec, StreamServer, StreamServerConfig};
//! let server = StreamServer::start(StreamServerConfig::default(), runtime).await?;
//! let url = server.exec_url(ExecSpec {
//!     container_id: "c1".into(),
//!     cmd: vec!["sh".into()],
//!     tty: true,
//!     stdin: true,
//!     stdout: true,
//!     stderr: false,
//! });
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]

pub mod portforward;
pub mod remotecommand;
pub mod runtime;
pub mod server;
pub mod spdy;
pub mod tokens;
pub mod ws_tunnel;

pub use runtime::{
    AttachSpec, BoxedReader, BoxedWriter, ExecSpec, SessionError, SessionStreams, StreamRuntime,
    TerminalSize,
};
pub use server::{StreamServer, StreamServerConfig};
pub use tokens::TokenError;
