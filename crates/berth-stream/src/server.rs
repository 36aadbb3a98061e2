//! The HTTP server: token lookup, protocol negotiation and the upgrade to
//! SPDY or WebSocket, then the session on the upgraded connection.

use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role as WsRole;
use tokio_tungstenite::WebSocketStream;

use crate::remotecommand::{self, spdy::Timeouts, Target};
use crate::tokens::{Request as Cached, TokenCache, TokenError};
use crate::ws_tunnel::{WsTunnel, TUNNEL_PREFIX};
use crate::{portforward, AttachSpec, ExecSpec, StreamRuntime};

const STREAM_PROTOCOL_HEADER: &str = "x-stream-protocol-version";
const ACCEPTED_PROTOCOLS_HEADER: &str = "x-accepted-stream-protocol-versions";
const SPDY_UPGRADE: &str = "SPDY/3.1";

/// Where the server listens and how long things may take.
#[derive(Debug, Clone)]
pub struct StreamServerConfig {
    pub address: IpAddr,
    /// 0 picks a free port.
    pub port: u16,
    /// How long a URL handed out by a CRI call stays usable.
    pub token_ttl: Duration,
    /// A session with no traffic either way for this long is closed.
    pub idle_timeout: Duration,
    /// How long the client has to open a session's streams.
    pub stream_creation_timeout: Duration,
}

impl Default for StreamServerConfig {
    fn default() -> Self {
        Self {
            address: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: 0,
            token_ttl: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(4 * 3600),
            stream_creation_timeout: Duration::from_secs(30),
        }
    }
}

/// How long the end of a session may take to drain before we drop it.
const GRACE: Duration = Duration::from_secs(10);

struct State<R> {
    runtime: Arc<R>,
    tokens: TokenCache,
    config: StreamServerConfig,
}

/// A running streaming server; dropping it stops accepting connections.
pub struct StreamServer {
    local_addr: SocketAddr,
    base_url: String,
    add: Box<dyn Fn(Cached) -> Result<String, TokenError> + Send + Sync>,
    accept: JoinHandle<()>,
}

impl Drop for StreamServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl StreamServer {
    /// Binds the listener and starts serving.
    pub async fn start<R: StreamRuntime>(
        config: StreamServerConfig,
        runtime: Arc<R>,
    ) -> std::io::Result<StreamServer> {
        Self::bind(config, runtime)
    }

    /// As [`StreamServer::start`], for callers that are not async but run
    /// inside a tokio runtime (it spawns the accept loop there).
    pub fn bind<R: StreamRuntime>(
        config: StreamServerConfig,
        runtime: Arc<R>,
    ) -> std::io::Result<StreamServer> {
        let listener = std::net::TcpListener::bind(SocketAddr::new(config.address, config.port))?;
        listener.set_nonblocking(true)?;
        let listener = TcpListener::from_std(listener)?;
        let local_addr = listener.local_addr()?;
        // An unspecified address is not one a client can dial.
        let url_addr = match local_addr.ip() {
            IpAddr::V4(ip) if ip.is_unspecified() => {
                SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), local_addr.port())
            }
            IpAddr::V6(ip) if ip.is_unspecified() => {
                SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), local_addr.port())
            }
            _ => local_addr,
        };
        let state = Arc::new(State {
            runtime,
            tokens: TokenCache::new(config.token_ttl),
            config,
        });
        let for_tokens = state.clone();
        let accept = tokio::spawn(accept_loop(listener, state));
        Ok(StreamServer {
            local_addr,
            base_url: format!("http://{url_addr}"),
            add: Box::new(move |request| for_tokens.tokens.insert(request)),
            accept,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// A single-use URL that runs `spec` for the client that opens it.
    pub fn exec_url(&self, spec: ExecSpec) -> Result<String, TokenError> {
        Ok(format!(
            "{}/exec/{}",
            self.base_url,
            (self.add)(Cached::Exec(spec))?
        ))
    }

    /// A single-use URL that attaches the client to a container.
    pub fn attach_url(&self, spec: AttachSpec) -> Result<String, TokenError> {
        Ok(format!(
            "{}/attach/{}",
            self.base_url,
            (self.add)(Cached::Attach(spec))?
        ))
    }

    /// A single-use URL that forwards ports of a pod sandbox.
    pub fn port_forward_url(&self, pod_sandbox_id: &str) -> Result<String, TokenError> {
        let token = (self.add)(Cached::PortForward {
            pod_sandbox_id: pod_sandbox_id.to_string(),
        })?;
        Ok(format!("{}/portforward/{token}", self.base_url))
    }
}

async fn accept_loop<R: StreamRuntime>(listener: TcpListener, state: Arc<State<R>>) {
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(conn) => conn,
            Err(e) => {
                tracing::warn!(error = %e, "stream server accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let state = state.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(handle(req, state)) }
            });
            if let Err(e) = http1::Builder::new()
                .serve_connection(TokioIo::new(tcp), service)
                .with_upgrades()
                .await
            {
                tracing::debug!(%peer, error = %e, "stream server connection ended");
            }
        });
    }
}

fn plain(status: StatusCode, text: &str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(format!("{text}\n"))));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// Every value of a header, comma lists split, in order.
fn header_list(headers: &HeaderMap, name: &str) -> Vec<String> {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect()
}

fn header_has(headers: &HeaderMap, name: header::HeaderName, token: &str) -> bool {
    header_list(headers, name.as_str())
        .iter()
        .any(|v| v.eq_ignore_ascii_case(token))
}

/// The client's first choice that the server supports (client order wins,
/// as in apimachinery's negotiation).
pub fn negotiate<'a>(client: &[String], server: &[&'a str]) -> Option<&'a str> {
    client
        .iter()
        .find_map(|c| server.iter().find(|s| **s == c.as_str()).copied())
}

fn handle<R: StreamRuntime>(
    mut req: Request<Incoming>,
    state: Arc<State<R>>,
) -> Response<Full<Bytes>> {
    let path = req.uri().path().trim_start_matches('/').to_string();
    let Some((kind, token)) = path.split_once('/') else {
        return plain(StatusCode::NOT_FOUND, "404 page not found");
    };
    if token.contains('/') || !matches!(kind, "exec" | "attach" | "portforward") {
        return plain(StatusCode::NOT_FOUND, "404 page not found");
    }
    // Consumed on first use whatever happens next: tokens are single-use.
    let cached = state.tokens.consume(token);
    let target = match (kind, cached) {
        ("exec", Some(Cached::Exec(spec))) => Session::Command(Target::Exec(spec)),
        ("attach", Some(Cached::Attach(spec))) => Session::Command(Target::Attach(spec)),
        ("portforward", Some(Cached::PortForward { pod_sandbox_id })) => {
            Session::PortForward(pod_sandbox_id)
        }
        _ => return plain(StatusCode::NOT_FOUND, "404 page not found"),
    };
    let headers = req.headers();
    let websocket = header_has(headers, header::UPGRADE, "websocket")
        && header_has(headers, header::CONNECTION, "upgrade");
    let prepared = if websocket {
        websocket_upgrade(headers, target)
    } else {
        spdy_upgrade(headers, target)
    };
    let (response, upgraded) = match prepared {
        Ok(p) => p,
        Err(response) => return *response,
    };
    let on_upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        match on_upgrade.await {
            Ok(io) => upgraded.run(TokioIo::new(io), state).await,
            Err(e) => tracing::debug!(error = %e, "stream upgrade failed"),
        }
    });
    response
}

enum Session {
    Command(Target),
    PortForward(String),
}

/// What runs on the connection once the 101 went out.
enum Upgraded {
    SpdyCommand(remotecommand::spdy::Version, Target),
    SpdyPortForward(String),
    WsCommand(remotecommand::websocket::Protocol, Target),
    WsPortForward(String),
}

fn switching(headers: &[(&str, String)]) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    for (name, value) in headers {
        if let Ok(value) = HeaderValue::from_str(value) {
            if let Ok(name) = header::HeaderName::from_bytes(name.as_bytes()) {
                response.headers_mut().append(name, value);
            }
        }
    }
    response
}

type Prepared = Result<(Response<Full<Bytes>>, Upgraded), Box<Response<Full<Bytes>>>>;

fn spdy_upgrade(headers: &HeaderMap, session: Session) -> Prepared {
    let server: Vec<&str> = match &session {
        Session::Command(_) => remotecommand::spdy::PROTOCOLS
            .iter()
            .map(|(n, _)| *n)
            .collect(),
        Session::PortForward(_) => vec![portforward::PROTOCOL],
    };
    let client = header_list(headers, STREAM_PROTOCOL_HEADER);
    let protocol = if client.is_empty() {
        // Clients from before negotiation speak the oldest protocol.
        match &session {
            Session::Command(_) => "channel.k8s.io",
            Session::PortForward(_) => portforward::PROTOCOL,
        }
    } else {
        match negotiate(&client, &server) {
            Some(p) => p,
            None => {
                let mut response = plain(
                    StatusCode::FORBIDDEN,
                    &format!(
                        "unable to upgrade: unable to negotiate protocol: client supports {client:?}, server accepts {server:?}"
                    ),
                );
                for p in &server {
                    response
                        .headers_mut()
                        .append(ACCEPTED_PROTOCOLS_HEADER, HeaderValue::from_static(p));
                }
                return Err(Box::new(response));
            }
        }
    };
    if !header_has(headers, header::CONNECTION, "upgrade")
        || !header_has(headers, header::UPGRADE, SPDY_UPGRADE)
    {
        return Err(Box::new(plain(
            StatusCode::BAD_REQUEST,
            "unable to upgrade: missing upgrade headers in request",
        )));
    }
    let response = switching(&[
        ("connection", "Upgrade".into()),
        ("upgrade", SPDY_UPGRADE.into()),
        (STREAM_PROTOCOL_HEADER, protocol.into()),
    ]);
    let upgraded = match session {
        Session::Command(target) => {
            let version = remotecommand::spdy::version_of(protocol)
                .unwrap_or(remotecommand::spdy::Version::V1);
            Upgraded::SpdyCommand(version, target)
        }
        Session::PortForward(pod) => Upgraded::SpdyPortForward(pod),
    };
    Ok((response, upgraded))
}

fn websocket_upgrade(headers: &HeaderMap, session: Session) -> Prepared {
    let Some(key) = headers.get(header::SEC_WEBSOCKET_KEY) else {
        return Err(Box::new(plain(
            StatusCode::BAD_REQUEST,
            "missing Sec-WebSocket-Key",
        )));
    };
    if headers
        .get(header::SEC_WEBSOCKET_VERSION)
        .is_none_or(|v| v.as_bytes() != b"13")
    {
        return Err(Box::new(plain(
            StatusCode::BAD_REQUEST,
            "unsupported Sec-WebSocket-Version (want 13)",
        )));
    }
    let client = header_list(headers, header::SEC_WEBSOCKET_PROTOCOL.as_str());
    let tunnelled = format!("{TUNNEL_PREFIX}{}", portforward::PROTOCOL);
    let (chosen, upgraded): (Option<String>, Upgraded) = match session {
        Session::Command(target) => {
            use remotecommand::websocket::{protocol_of, Protocol, PROTOCOLS};
            if client.is_empty() {
                (None, Upgraded::WsCommand(Protocol::Binary, target))
            } else {
                let server: Vec<&str> = PROTOCOLS.iter().map(|(n, _)| *n).collect();
                let Some(p) = negotiate(&client, &server) else {
                    return Err(Box::new(plain(
                        StatusCode::BAD_REQUEST,
                        &format!(
                            "requested protocol(s) are not supported: {client:?}; supports {server:?}"
                        ),
                    )));
                };
                let protocol = protocol_of(p).unwrap_or(Protocol::Binary);
                (Some(p.to_string()), Upgraded::WsCommand(protocol, target))
            }
        }
        Session::PortForward(pod) => {
            if !client.contains(&tunnelled) {
                return Err(Box::new(plain(
                    StatusCode::BAD_REQUEST,
                    &format!(
                        "requested protocol(s) are not supported: {client:?}; supports [{tunnelled:?}]"
                    ),
                )));
            }
            (Some(tunnelled.clone()), Upgraded::WsPortForward(pod))
        }
    };
    let mut reply = vec![
        ("connection", "Upgrade".to_string()),
        ("upgrade", "websocket".to_string()),
        ("sec-websocket-accept", derive_accept_key(key.as_bytes())),
    ];
    if let Some(p) = chosen {
        reply.push(("sec-websocket-protocol", p));
    }
    Ok((switching(&reply), upgraded))
}

impl Upgraded {
    async fn run<R: StreamRuntime>(
        self,
        io: TokioIo<hyper::upgrade::Upgraded>,
        state: Arc<State<R>>,
    ) {
        let config = &state.config;
        let runtime = state.runtime.clone();
        match self {
            Upgraded::SpdyCommand(version, target) => {
                let timeouts = Timeouts {
                    idle: config.idle_timeout,
                    stream_creation: config.stream_creation_timeout,
                    grace: GRACE,
                };
                remotecommand::spdy::serve(io, version, target, runtime, timeouts).await
            }
            Upgraded::SpdyPortForward(pod) => {
                portforward::serve(
                    io,
                    pod,
                    runtime,
                    config.idle_timeout,
                    config.stream_creation_timeout,
                )
                .await
            }
            Upgraded::WsCommand(protocol, target) => {
                let ws = WebSocketStream::from_raw_socket(io, WsRole::Server, None).await;
                remotecommand::websocket::serve(
                    ws,
                    protocol,
                    target,
                    runtime,
                    config.idle_timeout,
                    GRACE,
                )
                .await
            }
            Upgraded::WsPortForward(pod) => {
                let ws = WebSocketStream::from_raw_socket(io, WsRole::Server, None).await;
                portforward::serve(
                    WsTunnel::new(ws),
                    pod,
                    runtime,
                    config.idle_timeout,
                    config.stream_creation_timeout,
                )
                .await
            }
        }
    }
}
