//! A SPDY/3.1 session over one byte stream: the stream table, flow control,
//! PING echo, GOAWAY and stream half-close/reset.
//!
//! Three kinds of task share the connection: one reads and dispatches frames,
//! one encodes and writes them (control frames ahead of data, except the
//! GOAWAY of a graceful shutdown, which must follow all data), and one pump
//! per stream turns what the application writes into DATA frames within the
//! peer's window. The application sees each stream as an [`AsyncRead`]
//! ([`StreamReader`]) and an [`AsyncWrite`] ([`StreamWriter`]); dropping or
//! shutting down the writer half-closes the stream (FLAG_FIN).
//!
//! Flow control: the receive window is 64 KiB per stream and per session;
//! WINDOW_UPDATE goes out as the application consumes data. When sending we
//! honour the peer's windows once the peer shows it keeps them (it sent
//! SETTINGS or WINDOW_UPDATE): Go's spdystream, which kubelet clients,
//! crictl and critest use, never sends WINDOW_UPDATE, and a sender that
//! waited for one would stall every session after 64 KiB of output. Peers
//! that ignore our window get backpressure instead: the reader stops taking
//! frames off the connection while a stream's buffer is full.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::JoinHandle;

use super::frame::{
    goaway, rst, Frame, FrameDecoder, FrameEncoder, Setting, FLAG_FIN, SETTINGS_INITIAL_WINDOW_SIZE,
};
use super::header_block::Headers;

/// The SPDY/3 default window, per stream and (3.1) per session.
pub const DEFAULT_WINDOW: i64 = 64 * 1024;
/// Largest DATA payload we send in one frame.
const MAX_DATA_CHUNK: usize = 32 * 1024;
/// DATA frames buffered per stream before the reader waits for the
/// application (only reachable by peers that ignore our window).
const INBOUND_QUEUE: usize = 64;
/// Consumed bytes we let accumulate before acknowledging them.
const WINDOW_UPDATE_THRESHOLD: u32 = 16 * 1024;

/// Which end of the connection we are: it decides stream id and ping id
/// parity (clients use odd ids, servers even ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Client,
    Server,
}

#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// Close the connection after this long without a frame either way.
    pub idle_timeout: Duration,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            idle_timeout: Duration::from_secs(4 * 3600),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("the SPDY session is closed")]
    Closed,
    #[error("no stream ids left on this SPDY session")]
    StreamIdsExhausted,
}

/// The writing half of a stream: bytes written become DATA frames;
/// shutdown or drop sends FLAG_FIN.
/// (One end of an in-memory pipe: unlike a split simplex pipe, dropping it
/// is end of file for the pump.)
pub type StreamWriter = tokio::io::DuplexStream;

/// One SPDY stream as the application sees it.
pub struct Stream {
    pub id: u32,
    /// The headers of the SYN_STREAM that opened it.
    pub headers: Headers,
    pub reader: StreamReader,
    pub writer: StreamWriter,
}

enum Control {
    Frame(Frame),
    /// Flush what is queued, close the write side of the transport, stop.
    Shutdown,
}

/// A send window: the peer's allowance for one stream or the session.
struct SendWindow {
    available: Mutex<i64>,
    changed: Notify,
    reset: AtomicBool,
}

impl SendWindow {
    fn new(initial: i64) -> Arc<Self> {
        Arc::new(Self {
            available: Mutex::new(initial),
            changed: Notify::new(),
            reset: AtomicBool::new(false),
        })
    }

    fn adjust(&self, delta: i64) {
        *lock(&self.available) += delta;
        self.changed.notify_waiters();
    }

    fn cancel(&self) {
        self.reset.store(true, Ordering::SeqCst);
        self.changed.notify_waiters();
    }

    /// Takes up to `want` bytes of window, waiting while it is exhausted and
    /// the peer enforces it. `None` once the stream was reset.
    async fn take(&self, want: usize, enforced: &AtomicBool) -> Option<usize> {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.reset.load(Ordering::SeqCst) {
                return None;
            }
            {
                let mut available = lock(&self.available);
                if !enforced.load(Ordering::SeqCst) {
                    // Still counted, so the window is right if the peer
                    // starts enforcing it later.
                    *available -= want as i64;
                    return Some(want);
                }
                if *available > 0 {
                    let n = want.min(*available as usize);
                    *available -= n as i64;
                    return Some(n);
                }
            }
            changed.await;
        }
    }
}

struct StreamEntry {
    inbound: Option<mpsc::Sender<Bytes>>,
    window: Arc<SendWindow>,
    local_closed: bool,
    remote_closed: bool,
}

struct Inner {
    streams: HashMap<u32, StreamEntry>,
    next_stream_id: u32,
    last_peer_stream_id: u32,
    initial_send_window: i64,
    going_away: bool,
    closed: bool,
    pumps: Vec<JoinHandle<()>>,
}

struct Shared {
    role: Role,
    inner: Mutex<Inner>,
    /// The peer keeps flow-control windows (it sent SETTINGS or
    /// WINDOW_UPDATE), so we honour them.
    enforce_windows: AtomicBool,
    session_window: Arc<SendWindow>,
    control: mpsc::UnboundedSender<Control>,
    data: mpsc::Sender<Frame>,
    started: Instant,
    /// Milliseconds since `started` of the last frame read or written.
    last_activity: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Shared {
    fn touch(&self) {
        self.last_activity
            .store(self.started.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    fn idle_for(&self) -> Duration {
        let last = Duration::from_millis(self.last_activity.load(Ordering::Relaxed));
        self.started.elapsed().saturating_sub(last)
    }

    fn send_control(&self, frame: Frame) {
        let _ = self.control.send(Control::Frame(frame));
    }

    /// Ids the peer may open: odd from clients, even from servers.
    fn is_peer_stream_id(&self, id: u32) -> bool {
        match self.role {
            Role::Server => !id.is_multiple_of(2),
            Role::Client => id.is_multiple_of(2) && id != 0,
        }
    }

    fn mark_closed(&self, id: u32, local: bool) {
        let mut inner = lock(&self.inner);
        let Some(entry) = inner.streams.get_mut(&id) else {
            return;
        };
        if local {
            entry.local_closed = true;
        } else {
            entry.remote_closed = true;
            entry.inbound = None;
        }
        if entry.local_closed && entry.remote_closed {
            inner.streams.remove(&id);
        }
    }

    fn reset_stream(&self, id: u32) {
        if let Some(entry) = lock(&self.inner).streams.remove(&id) {
            entry.window.cancel();
        }
    }

    /// Adds a stream to the table and starts its pump.
    fn register(self: &Arc<Self>, id: u32, headers: Headers, remote_fin: bool) -> Stream {
        let (tx, rx) = mpsc::channel(INBOUND_QUEUE);
        let (pipe_reader, writer) = tokio::io::duplex(MAX_DATA_CHUNK);
        let mut inner = lock(&self.inner);
        let window = SendWindow::new(inner.initial_send_window);
        inner.streams.insert(
            id,
            StreamEntry {
                inbound: (!remote_fin).then_some(tx),
                window: window.clone(),
                local_closed: false,
                remote_closed: remote_fin,
            },
        );
        let pump = tokio::spawn(pump(self.clone(), id, window, pipe_reader));
        inner.pumps.retain(|p| !p.is_finished());
        inner.pumps.push(pump);
        drop(inner);
        Stream {
            id,
            headers,
            reader: StreamReader {
                id,
                rx,
                pending: Bytes::new(),
                unacked: 0,
                shared: self.clone(),
            },
            writer,
        }
    }
}

/// Moves what the application writes on one stream into DATA frames.
async fn pump(
    shared: Arc<Shared>,
    id: u32,
    window: Arc<SendWindow>,
    mut pipe: tokio::io::DuplexStream,
) {
    let mut buf = vec![0u8; MAX_DATA_CHUNK];
    loop {
        let n = pipe.read(&mut buf).await.unwrap_or_default();
        if n == 0 {
            if window.reset.load(Ordering::SeqCst) {
                return;
            }
            let fin = Frame::Data {
                stream_id: id,
                flags: FLAG_FIN,
                data: Bytes::new(),
            };
            if shared.data.send(fin).await.is_ok() {
                shared.mark_closed(id, true);
            }
            return;
        }
        let mut sent = 0;
        while sent < n {
            let Some(k) = window.take(n - sent, &shared.enforce_windows).await else {
                return;
            };
            let Some(m) = shared.session_window.take(k, &shared.enforce_windows).await else {
                return;
            };
            // Give back what the session window did not cover.
            window.adjust((k - m) as i64);
            let frame = Frame::Data {
                stream_id: id,
                flags: 0,
                data: Bytes::copy_from_slice(&buf[sent..sent + m]),
            };
            if shared.data.send(frame).await.is_err() {
                return;
            }
            sent += m;
        }
    }
}

/// The reading half of a stream. Reads 0 bytes once the peer half-closed
/// it (FLAG_FIN), reset it, or the session ended.
pub struct StreamReader {
    id: u32,
    rx: mpsc::Receiver<Bytes>,
    pending: Bytes,
    unacked: u32,
    shared: Arc<Shared>,
}

impl StreamReader {
    fn acknowledge(&mut self, n: usize, force: bool) {
        self.unacked += n as u32;
        if self.unacked > 0 && (force || self.unacked >= WINDOW_UPDATE_THRESHOLD) {
            let delta = std::mem::take(&mut self.unacked);
            for stream_id in [self.id, 0] {
                self.shared
                    .send_control(Frame::WindowUpdate { stream_id, delta });
            }
        }
    }
}

impl AsyncRead for StreamReader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        if this.pending.is_empty() {
            match this.rx.poll_recv(cx) {
                Poll::Ready(Some(chunk)) => this.pending = chunk,
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Pending => return Poll::Pending,
            }
        }
        let n = this.pending.len().min(buf.remaining());
        buf.put_slice(&this.pending.split_to(n));
        let drained = this.pending.is_empty() && this.rx.is_empty();
        this.acknowledge(n, drained);
        Poll::Ready(Ok(()))
    }
}

impl Drop for StreamReader {
    fn drop(&mut self) {
        // Whatever the application will never read must not hold the
        // peer's window shut.
        let mut dropped = self.pending.len();
        self.rx.close();
        while let Ok(chunk) = self.rx.try_recv() {
            dropped += chunk.len();
        }
        self.acknowledge(dropped, true);
    }
}

/// The application's handle on a session.
#[derive(Clone)]
pub struct Session {
    shared: Arc<Shared>,
    closed: watch::Receiver<bool>,
}

impl Session {
    /// Starts the session's tasks on `io`. New streams the peer opens arrive
    /// on the returned receiver (a server replies to each with SYN_REPLY).
    pub fn start<T>(
        io: T,
        role: Role,
        config: SessionConfig,
    ) -> (Session, mpsc::UnboundedReceiver<Stream>)
    where
        T: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (control_tx, control_rx) = mpsc::unbounded_channel();
        let (data_tx, data_rx) = mpsc::channel(8);
        let (incoming_tx, incoming_rx) = mpsc::unbounded_channel();
        let (closed_tx, closed_rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            role,
            inner: Mutex::new(Inner {
                streams: HashMap::new(),
                next_stream_id: if role == Role::Client { 1 } else { 2 },
                last_peer_stream_id: 0,
                initial_send_window: DEFAULT_WINDOW,
                going_away: false,
                closed: false,
                pumps: Vec::new(),
            }),
            enforce_windows: AtomicBool::new(false),
            session_window: SendWindow::new(DEFAULT_WINDOW),
            control: control_tx,
            data: data_tx,
            started: Instant::now(),
            last_activity: AtomicU64::new(0),
        });
        let (read_half, write_half) = tokio::io::split(io);
        tokio::spawn(write_loop(shared.clone(), write_half, control_rx, data_rx));
        tokio::spawn(read_loop(
            shared.clone(),
            read_half,
            incoming_tx,
            closed_tx,
            config,
        ));
        (
            Session {
                shared,
                closed: closed_rx,
            },
            incoming_rx,
        )
    }

    /// Opens a stream to the peer (SYN_STREAM).
    pub fn open_stream(&self, headers: Headers) -> Result<Stream, SessionError> {
        let id = {
            let mut inner = lock(&self.shared.inner);
            if inner.closed || inner.going_away {
                return Err(SessionError::Closed);
            }
            let id = inner.next_stream_id;
            if id > 0x7fff_ffff {
                return Err(SessionError::StreamIdsExhausted);
            }
            inner.next_stream_id += 2;
            id
        };
        // Queue SYN_STREAM before the pump exists, so it precedes any DATA.
        self.shared.send_control(Frame::SynStream {
            stream_id: id,
            associated_to: 0,
            priority: 0,
            slot: 0,
            flags: 0,
            headers: headers.clone(),
        });
        Ok(self.shared.register(id, headers, false))
    }

    /// Announces the window we keep for each stream, which also tells a
    /// peer of ours that we enforce windows.
    pub fn send_initial_window(&self, size: u32) {
        self.shared.send_control(Frame::Settings {
            flags: 0,
            entries: vec![Setting {
                flags: 0,
                id: SETTINGS_INITIAL_WINDOW_SIZE,
                value: size,
            }],
        });
    }

    /// Sends a raw frame (PING, RST_STREAM, ...).
    pub fn send_frame(&self, frame: Frame) {
        if let Frame::RstStream { stream_id, .. } = frame {
            self.shared.reset_stream(stream_id);
        }
        self.shared.send_control(frame);
    }

    /// Resets a stream (RST_STREAM with `status`).
    pub fn reset(&self, stream_id: u32, status: u32) {
        self.send_frame(Frame::RstStream { stream_id, status });
    }

    pub fn is_closed(&self) -> bool {
        *self.closed.borrow()
    }

    /// Resolves once the connection ended: the peer closed it, it failed,
    /// or it was idle too long.
    pub async fn closed(&self) {
        let mut closed = self.closed.clone();
        let _ = closed.wait_for(|c| *c).await;
    }

    /// Ends the session gracefully: lets each stream's queued output drain
    /// (up to `grace`), sends GOAWAY, closes our side of the connection and
    /// waits (up to `grace` again) for the peer to close its side.
    pub async fn shutdown(&self, grace: Duration) {
        let pumps = std::mem::take(&mut lock(&self.shared.inner).pumps);
        let drain = async {
            for pump in pumps {
                let _ = pump.await;
            }
        };
        let _ = tokio::time::timeout(grace, drain).await;
        let last_good_stream_id = {
            let mut inner = lock(&self.shared.inner);
            inner.going_away = true;
            inner.last_peer_stream_id
        };
        // GOAWAY queues behind the DATA and FIN frames the pumps queued,
        // not ahead of them as control frames do: Go's spdystream stops
        // reading the connection at GOAWAY, so a frame written after it is
        // never seen (client-go would find the error stream ended without
        // the exit status, and stdout cut short).
        let goaway = Frame::GoAway {
            last_good_stream_id,
            status: goaway::OK,
        };
        // A peer that stopped reading must not hold the shutdown forever.
        let _ = tokio::time::timeout(grace, self.shared.data.send(goaway)).await;
        let _ = self.shared.control.send(Control::Shutdown);
        let _ = tokio::time::timeout(grace, self.closed()).await;
        abort(&self.shared);
    }
}

/// Drops every stream at once (the connection is going away): readers see
/// end of stream, writers a broken pipe.
fn abort(shared: &Shared) {
    let streams = {
        let mut inner = lock(&shared.inner);
        inner.closed = true;
        std::mem::take(&mut inner.streams)
    };
    for entry in streams.into_values() {
        entry.window.cancel();
    }
    shared.session_window.cancel();
    let _ = shared.control.send(Control::Shutdown);
}

async fn write_loop<W: AsyncWrite>(
    shared: Arc<Shared>,
    io: W,
    mut control: mpsc::UnboundedReceiver<Control>,
    mut data: mpsc::Receiver<Frame>,
) {
    tokio::pin!(io);
    let mut encoder = FrameEncoder::new();
    let mut buf = Vec::with_capacity(64 * 1024);
    loop {
        let item = tokio::select! {
            biased;
            Some(c) = control.recv() => c,
            Some(f) = data.recv() => Control::Frame(f),
            else => break,
        };
        match item {
            Control::Frame(frame) => {
                if encoder.encode(&frame, &mut buf).is_err() {
                    break;
                }
            }
            Control::Shutdown => {
                // Control frames overtake data; what the pumps queued before
                // the shutdown still belongs on the wire.
                while let Ok(frame) = data.try_recv() {
                    if encoder.encode(&frame, &mut buf).is_err() {
                        break;
                    }
                }
                let _ = io.write_all(&buf).await;
                let _ = io.flush().await;
                let _ = io.shutdown().await;
                break;
            }
        }
        if (control.is_empty() && data.is_empty()) || buf.len() >= 64 * 1024 {
            if io.write_all(&buf).await.is_err() || io.flush().await.is_err() {
                break;
            }
            buf.clear();
            shared.touch();
        }
    }
    // Nothing more can be sent: release every pump waiting to.
    control.close();
    data.close();
}

async fn read_loop<R: AsyncRead>(
    shared: Arc<Shared>,
    io: R,
    incoming: mpsc::UnboundedSender<Stream>,
    closed: watch::Sender<bool>,
    config: SessionConfig,
) {
    tokio::pin!(io);
    let mut decoder = FrameDecoder::new();
    let mut buf = BytesMut::with_capacity(64 * 1024);
    'read: loop {
        loop {
            match decoder.decode(&mut buf) {
                Ok(Some(frame)) => {
                    shared.touch();
                    if !handle_frame(&shared, frame, &incoming).await {
                        break 'read;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!(error = %e, "SPDY protocol error");
                    shared.send_control(Frame::GoAway {
                        last_good_stream_id: lock(&shared.inner).last_peer_stream_id,
                        status: goaway::PROTOCOL_ERROR,
                    });
                    break 'read;
                }
            }
        }
        let idle = config.idle_timeout.saturating_sub(shared.idle_for());
        match tokio::time::timeout(idle, io.read_buf(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(_)) => {}
            Err(_) => {
                if shared.idle_for() >= config.idle_timeout {
                    tracing::debug!("SPDY session idle, closing");
                    shared.send_control(Frame::GoAway {
                        last_good_stream_id: lock(&shared.inner).last_peer_stream_id,
                        status: goaway::OK,
                    });
                    break;
                }
            }
        }
    }
    abort(&shared);
    let _ = closed.send(true);
}

/// Acts on one frame from the peer; false ends the session.
async fn handle_frame(
    shared: &Arc<Shared>,
    frame: Frame,
    incoming: &mpsc::UnboundedSender<Stream>,
) -> bool {
    match frame {
        Frame::SynStream {
            stream_id,
            flags,
            headers,
            ..
        } => {
            let refuse = {
                let mut inner = lock(&shared.inner);
                if !shared.is_peer_stream_id(stream_id) || stream_id <= inner.last_peer_stream_id {
                    Some(rst::PROTOCOL_ERROR)
                } else {
                    inner.last_peer_stream_id = stream_id;
                    if inner.going_away || inner.closed {
                        Some(rst::REFUSED_STREAM)
                    } else if inner.streams.contains_key(&stream_id) {
                        Some(rst::STREAM_IN_USE)
                    } else {
                        None
                    }
                }
            };
            if let Some(status) = refuse {
                shared.send_control(Frame::RstStream { stream_id, status });
                return true;
            }
            if shared.role == Role::Server {
                shared.send_control(Frame::SynReply {
                    stream_id,
                    flags: 0,
                    headers: Headers::new(),
                });
            }
            let stream = shared.register(stream_id, headers, flags & FLAG_FIN != 0);
            let _ = incoming.send(stream);
        }
        Frame::SynReply {
            stream_id, flags, ..
        }
        | Frame::Headers {
            stream_id, flags, ..
        } => {
            if flags & FLAG_FIN != 0 {
                shared.mark_closed(stream_id, false);
            }
        }
        Frame::Data {
            stream_id,
            flags,
            data,
        } => {
            let sender = lock(&shared.inner)
                .streams
                .get(&stream_id)
                .and_then(|e| e.inbound.clone());
            let len = data.len();
            let delivered = match sender {
                Some(tx) if len > 0 => tx.send(data).await.is_ok(),
                Some(_) => true,
                None => false,
            };
            if !delivered && len > 0 {
                // Nobody will read it: acknowledge at once so the peer's
                // window does not close on data that went nowhere.
                for id in [stream_id, 0] {
                    shared.send_control(Frame::WindowUpdate {
                        stream_id: id,
                        delta: len as u32,
                    });
                }
            }
            if flags & FLAG_FIN != 0 {
                shared.mark_closed(stream_id, false);
            }
        }
        Frame::RstStream { stream_id, .. } => shared.reset_stream(stream_id),
        Frame::Settings { entries, .. } => {
            for setting in entries {
                if setting.id == SETTINGS_INITIAL_WINDOW_SIZE {
                    shared.enforce_windows.store(true, Ordering::SeqCst);
                    let mut inner = lock(&shared.inner);
                    let delta = i64::from(setting.value) - inner.initial_send_window;
                    inner.initial_send_window = i64::from(setting.value);
                    for entry in inner.streams.values() {
                        entry.window.adjust(delta);
                    }
                }
            }
        }
        Frame::WindowUpdate { stream_id, delta } => {
            shared.enforce_windows.store(true, Ordering::SeqCst);
            if stream_id == 0 {
                shared.session_window.adjust(i64::from(delta));
            } else if let Some(entry) = lock(&shared.inner).streams.get(&stream_id) {
                entry.window.adjust(i64::from(delta));
            }
        }
        Frame::Ping { id } => {
            // Echo the peer's pings; ours come back with our own parity.
            let ours = match shared.role {
                Role::Client => !id.is_multiple_of(2),
                Role::Server => id.is_multiple_of(2),
            };
            if !ours {
                shared.send_control(Frame::Ping { id });
            }
        }
        Frame::GoAway { .. } => {
            lock(&shared.inner).going_away = true;
        }
        Frame::Unknown { .. } => {}
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The frames a Go spdystream peer acts on: it stops reading the
    /// connection at the first GOAWAY, so nothing after it counts.
    fn seen_by_spdystream(frames: &[Frame]) -> &[Frame] {
        match frames
            .iter()
            .position(|f| matches!(f, Frame::GoAway { .. }))
        {
            Some(i) => &frames[..=i],
            None => frames,
        }
    }

    /// What a stream carried in the frames the peer acts on, and whether
    /// its FIN was among them.
    fn delivered(frames: &[Frame], id: u32) -> (Vec<u8>, bool) {
        let mut out = Vec::new();
        let mut fin = false;
        for frame in frames {
            if let Frame::Data {
                stream_id,
                flags,
                data,
            } = frame
            {
                if *stream_id == id {
                    out.extend_from_slice(data);
                    fin |= flags & FLAG_FIN != 0;
                }
            }
        }
        (out, fin)
    }

    #[tokio::test]
    async fn goaway_follows_the_data_queued_before_shutdown() {
        // A one-byte transport keeps the writer busy with the first frame
        // while the stream's output and the shutdown queue up behind it.
        let (ours, mut peer) = tokio::io::duplex(1);
        let (session, _incoming) = Session::start(ours, Role::Server, SessionConfig::default());
        let mut stream = session
            .open_stream(Headers::new().with("streamType", "error"))
            .unwrap();
        stream.writer.write_all(b"exit status").await.unwrap();
        stream.writer.shutdown().await.unwrap();

        let shutdown = tokio::spawn({
            let session = session.clone();
            async move { session.shutdown(Duration::from_secs(30)).await }
        });
        // Wait until the shutdown has queued its GOAWAY (it marks the
        // session going away just before) with nothing read off the wire.
        while !lock(&session.shared.inner).going_away {
            tokio::task::yield_now().await;
        }

        let mut wire = Vec::new();
        peer.read_to_end(&mut wire).await.unwrap();
        drop(peer);
        shutdown.await.unwrap();

        let mut buf = BytesMut::from(&wire[..]);
        let mut decoder = FrameDecoder::new();
        let mut frames = Vec::new();
        while let Some(frame) = decoder.decode(&mut buf).unwrap() {
            frames.push(frame);
        }
        assert!(
            matches!(frames.last(), Some(Frame::GoAway { .. })),
            "GOAWAY is not the last frame: {frames:?}"
        );
        assert_eq!(
            delivered(seen_by_spdystream(&frames), stream.id),
            (b"exit status".to_vec(), true),
            "{frames:?}"
        );
    }
}
