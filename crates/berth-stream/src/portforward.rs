//! The `portforward.k8s.io` protocol over SPDY: for each forwarded
//! connection the client opens a data and an error stream sharing a
//! `requestID` and naming the pod's `port`; the server dials the port and
//! copies both ways, writing any failure on the error stream.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::spdy::frame::rst;
use crate::spdy::{Role, Session, SessionConfig, Stream};
use crate::StreamRuntime;

pub const PROTOCOL: &str = "portforward.k8s.io";

#[derive(Default)]
struct Pair {
    data: Option<Stream>,
    error: Option<Stream>,
}

/// What a stream's headers say, or why they are unusable.
fn classify(stream: &Stream) -> Result<(bool, u16, String), String> {
    let port = stream
        .headers
        .get("port")
        .ok_or_else(|| "\"port\" header is required".to_string())?;
    let port: u16 = port
        .parse()
        .map_err(|_| format!("unable to parse {port:?} as a port"))?;
    if port == 0 {
        return Err("port \"0\" must be > 0".into());
    }
    let is_data = match stream.headers.get("streamtype") {
        Some("data") => true,
        Some("error") => false,
        Some(other) => return Err(format!("invalid stream type {other:?}")),
        None => return Err("\"streamType\" header is required".into()),
    };
    // Clients before request ids open error then data with consecutive odd
    // ids; pair them the way kubelet does.
    let request_id = match stream.headers.get("requestid") {
        Some(id) if !id.is_empty() => id.to_string(),
        _ if is_data => stream.id.saturating_sub(2).to_string(),
        _ => stream.id.to_string(),
    };
    Ok((is_data, port, request_id))
}

/// Serves one upgraded connection for `pod_sandbox_id`.
pub async fn serve<R, T>(
    io: T,
    pod_sandbox_id: String,
    runtime: Arc<R>,
    idle: Duration,
    stream_creation: Duration,
) where
    R: StreamRuntime,
    T: AsyncRead + AsyncWrite + Send + 'static,
{
    let (session, mut incoming) =
        Session::start(io, Role::Server, SessionConfig { idle_timeout: idle });
    let mut pairs: HashMap<String, Pair> = HashMap::new();
    let (expired_tx, mut expired_rx) = mpsc::unbounded_channel::<String>();
    let mut forwards = JoinSet::new();
    loop {
        tokio::select! {
            stream = incoming.recv() => {
                let Some(mut stream) = stream else { break };
                let (is_data, port, request_id) = match classify(&stream) {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::debug!(error = %e, "rejecting port-forward stream");
                        session.reset(stream.id, rst::PROTOCOL_ERROR);
                        continue;
                    }
                };
                let pair = pairs.entry(request_id.clone()).or_insert_with(|| {
                    let tx = expired_tx.clone();
                    let id = request_id.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(stream_creation).await;
                        let _ = tx.send(id);
                    });
                    Pair::default()
                });
                let slot = if is_data { &mut pair.data } else { &mut pair.error };
                if slot.is_some() {
                    let kind = if is_data { "data" } else { "error" };
                    let msg = format!("error processing stream for request {request_id}: {kind} stream already assigned");
                    if let Some(error) = pair.error.as_mut() {
                        let _ = error.writer.write_all(msg.as_bytes()).await;
                    }
                    let _ = stream.writer.shutdown().await;
                    continue;
                }
                *slot = Some(stream);
                if pair.data.is_some() && pair.error.is_some() {
                    if let Some(Pair { data: Some(data), error: Some(error) }) = pairs.remove(&request_id) {
                        forwards.spawn(forward(runtime.clone(), pod_sandbox_id.clone(), port, data, error));
                    }
                }
            }
            Some(request_id) = expired_rx.recv() => {
                if let Some(mut pair) = pairs.remove(&request_id) {
                    if let Some(error) = pair.error.as_mut() {
                        let msg = format!("request {request_id}: timed out waiting for streams");
                        let _ = error.writer.write_all(msg.as_bytes()).await;
                    }
                }
            }
            Some(_) = forwards.join_next(), if !forwards.is_empty() => {}
            _ = session.closed() => break,
        }
    }
    // Dropping the set cancels the copies still running.
    forwards.abort_all();
}

/// One forwarded connection: dial, then copy both ways until both
/// directions ended.
async fn forward<R: StreamRuntime>(
    runtime: Arc<R>,
    pod_sandbox_id: String,
    port: u16,
    data: Stream,
    mut error: Stream,
) {
    let conn = match runtime.port_forward(&pod_sandbox_id, port).await {
        Ok(conn) => conn,
        Err(e) => {
            let msg = format!("error forwarding port {port} to pod {pod_sandbox_id}: {e}");
            let _ = error.writer.write_all(msg.as_bytes()).await;
            let _ = error.writer.shutdown().await;
            return;
        }
    };
    let (mut pod_read, mut pod_write) = conn.into_split();
    let Stream {
        reader: mut client_read,
        writer: mut client_write,
        ..
    } = data;
    let to_pod = async {
        let result = tokio::io::copy(&mut client_read, &mut pod_write).await;
        let _ = pod_write.shutdown().await;
        result
    };
    let from_pod = async {
        let result = tokio::io::copy(&mut pod_read, &mut client_write).await;
        let _ = client_write.shutdown().await;
        result
    };
    let (up, down) = tokio::join!(to_pod, from_pod);
    if let Some(e) = up.err().or(down.err()) {
        let msg = format!("error forwarding port {port} to pod {pod_sandbox_id}: {e}");
        let _ = error.writer.write_all(msg.as_bytes()).await;
    }
    let _ = error.writer.shutdown().await;
}
