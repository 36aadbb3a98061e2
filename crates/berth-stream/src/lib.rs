//! The streaming server behind the CRI `Exec`, `Attach` and `PortForward`
//! RPCs. The runtime answers those RPCs with a URL on this server; the
//! client (kubelet, crictl, critest) then speaks the Kubernetes
//! remotecommand or portforward protocol to it, over SPDY/3.1 or WebSocket.
//!
//! The server knows nothing about containers: it calls a [`StreamRuntime`]
//! for the processes and connections behind each session.

pub mod runtime;
pub mod spdy;

pub use runtime::{
    AttachSpec, BoxedReader, BoxedWriter, ExecSpec, SessionError, SessionStreams, StreamRuntime,
    TerminalSize,
};
