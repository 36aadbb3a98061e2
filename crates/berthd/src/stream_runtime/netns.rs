//! Port-forward dials: a TCP connection to the pod's loopback, made from
//! inside its network namespace. `setns` changes only the calling thread,
//! so the dial runs on a dedicated thread that ends right after: no tokio
//! worker ever enters a pod's namespace. The socket keeps the namespace it
//! was created in and is handed to tokio.

use std::fs::File;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use berth_stream::SessionError;
use nix::sched::{setns, CloneFlags};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

/// How long one dial may take.
const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

/// Where a port-forward dials, in order: IPv4 loopback, then IPv6.
pub fn dial_order(port: u16) -> [SocketAddr; 2] {
    [
        SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
        SocketAddr::from((Ipv6Addr::LOCALHOST, port)),
    ]
}

/// Connects to `localhost:port` in `netns` (None: the host's network).
pub async fn connect(netns: Option<PathBuf>, port: u16) -> Result<TcpStream, SessionError> {
    let (tx, rx) = oneshot::channel();
    std::thread::Builder::new()
        .name("berth-port-forward".into())
        .spawn(move || {
            let _ = tx.send(dial(netns.as_deref(), port));
        })
        .map_err(|err| SessionError::Failed(format!("port-forward thread: {err}")))?;
    let stream = rx
        .await
        .map_err(|_| SessionError::Failed("port-forward thread vanished".into()))??;
    stream
        .set_nonblocking(true)
        .and_then(|()| TcpStream::from_std(stream))
        .map_err(|err| SessionError::Failed(format!("port-forward socket: {err}")))
}

fn dial(netns: Option<&Path>, port: u16) -> Result<std::net::TcpStream, SessionError> {
    if let Some(path) = netns {
        let file = File::open(path).map_err(|err| {
            SessionError::Failed(format!("network namespace {}: {err}", path.display()))
        })?;
        setns(&file, CloneFlags::CLONE_NEWNET).map_err(|err| {
            SessionError::Failed(format!(
                "entering network namespace {}: {err}",
                path.display()
            ))
        })?;
    }
    let mut errors = Vec::new();
    for addr in dial_order(port) {
        match std::net::TcpStream::connect_timeout(&addr, DIAL_TIMEOUT) {
            Ok(stream) => return Ok(stream),
            Err(err) => errors.push(format!("{addr}: {err}")),
        }
    }
    Err(SessionError::Failed(format!(
        "port-forward to port {port}: {}",
        errors.join("; ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_first_then_ipv6() {
        assert_eq!(
            dial_order(8080).map(|a| a.to_string()),
            ["127.0.0.1:8080".to_string(), "[::1]:8080".to_string()]
        );
    }

    #[tokio::test]
    async fn dials_the_host_loopback_without_a_netns() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let (client, accepted) = tokio::join!(connect(None, port), listener.accept());
        let client = client.expect("connect");
        let (_, peer) = accepted.expect("accept");
        assert_eq!(client.local_addr().expect("local"), peer);
    }

    #[tokio::test]
    async fn a_missing_netns_is_an_error_naming_it() {
        let err = connect(Some(PathBuf::from("/nonexistent/ns/net")), 1)
            .await
            .expect_err("no such netns");
        assert!(err.to_string().contains("/nonexistent/ns/net"), "{err}");
    }
}
