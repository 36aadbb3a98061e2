//! The daemon's event loop: one `poll(2)` over the SIGCHLD signalfd, the
//! control socket and its clients, the container's output, the attach
//! socket and its attachers, the container's stdin and the output of exec
//! sessions. Output is always drained, whether or not anyone listens.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixListener;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use crate::attach_hub::{AttachHub, AttachToken, ContainerStdin};
use crate::backend::RuntimeBackend;
use crate::bundle::BundleInfo;
use crate::conn::{Conn, Line};
use crate::exec::{ExecSession, ExecStream};
use crate::logfile::LogFile;
use crate::oom::OomProbe;
use crate::output::OutputPipe;
use crate::reaper::Children;
use crate::session::InteractiveSession;
use crate::setup::{Created, ShimConfig};
use crate::timestamp;
use berth_shim_api::protocol::{ErrorCode, ExitRecord, Request, Response, RunState};

mod lifecycle;
mod requests;

/// After the init exited, how long its output may take to reach EOF before
/// the exit is published anyway (something outside the container may hold
/// the pipes).
const INIT_OUTPUT_GRACE: Duration = Duration::from_secs(2);

const SIGKILL: i32 = 9;

#[derive(Debug)]
struct Exited {
    code: i32,
    at: String,
    drain_until: Instant,
}

#[derive(Debug)]
struct InitState {
    pid: i32,
    created_at: String,
    started_at: Option<String>,
    /// Reaped.
    exited: Option<Exited>,
    /// Written to the exit file: the container is stopped.
    record: Option<ExitRecord>,
}

struct PendingExec {
    session: ExecSession,
    client: Option<u64>,
}

#[derive(Clone, Copy)]
enum Token {
    Signal,
    Listener,
    Output(usize),
    Client(u64),
    Exec(usize, ExecStream),
    Attach(AttachToken),
    Oom,
}

pub struct Server {
    cfg: ShimConfig,
    backend: Box<dyn RuntimeBackend>,
    bundle: BundleInfo,
    oom: OomProbe,
    oom_baseline: u64,
    log: LogFile,
    outputs: Vec<OutputPipe>,
    listener: UnixListener,
    children: Box<dyn Children>,
    clients: BTreeMap<u64, Conn>,
    next_client: u64,
    execs: Vec<PendingExec>,
    sessions: Vec<InteractiveSession>,
    attach: AttachHub,
    init: InitState,
    /// A shutdown was asked for (by this client, if still connected).
    shutdown: Option<Option<u64>>,
    exit_with: Option<i32>,
    /// `--restore`: the container's stdio ends for the restored processes,
    /// until `start` restores them.
    restore_stdio: Option<[std::os::fd::OwnedFd; 3]>,
}

impl Server {
    pub fn new(
        cfg: ShimConfig,
        created: Created,
        listener: UnixListener,
        attach_listener: UnixListener,
        children: Box<dyn Children>,
    ) -> Self {
        // without a cgroupsPath libcontainer picks one itself; berthd always
        // sets it, so OOM detection simply stays off then
        let cgroup_root = std::path::Path::new("/sys/fs/cgroup");
        let mut oom = match std::fs::read_to_string(format!("/proc/{}/cgroup", created.init_pid)) {
            Ok(text) => OomProbe::for_process(cgroup_root, &text),
            Err(_) => {
                let cgroups_path = created.bundle.cgroups_path.clone().unwrap_or_default();
                OomProbe::new(cgroup_root, &cgroups_path)
            }
        };
        oom.watch();
        let oom_baseline = oom.counted().unwrap_or(0);
        let stdin = created.stdin.map(|fd| ContainerStdin {
            fd,
            once: cfg.stdin_once,
        });
        let attach = AttachHub::new(attach_listener, stdin, created.pty);
        Self {
            init: InitState {
                pid: created.init_pid,
                created_at: timestamp::now(),
                started_at: None,
                exited: None,
                record: None,
            },
            cfg,
            backend: created.backend,
            bundle: created.bundle,
            oom,
            oom_baseline,
            log: created.log,
            outputs: created.outputs,
            listener,
            children,
            clients: BTreeMap::new(),
            next_client: 0,
            execs: Vec::new(),
            sessions: Vec::new(),
            attach,
            shutdown: None,
            exit_with: None,
            restore_stdio: created.restore_stdio,
        }
    }

    pub fn init_pid(&self) -> i32 {
        self.init.pid
    }

    /// Serves until a `shutdown` succeeds; returns the exit code.
    pub fn run(mut self) -> i32 {
        // an init that died while the daemon was starting is reaped here
        self.on_sigchld();
        loop {
            if let Some(code) = self.exit_with {
                return code;
            }
            let timeout = self.poll_timeout(Instant::now());
            let ready = match self.poll(timeout) {
                Ok(r) => r,
                Err(Errno::EINTR) => Vec::new(),
                Err(err) => {
                    tracing::error!(%err, "poll failed");
                    std::thread::sleep(Duration::from_millis(100));
                    Vec::new()
                }
            };
            for (token, revents) in ready {
                self.dispatch(token, revents);
            }
            self.after_events(Instant::now());
        }
    }

    fn poll(&self, timeout: PollTimeout) -> Result<Vec<(Token, PollFlags)>, Errno> {
        let mut entries: Vec<(Token, BorrowedFd<'_>, PollFlags)> = vec![
            (Token::Signal, self.children.fd(), PollFlags::POLLIN),
            (Token::Listener, self.listener.as_fd(), PollFlags::POLLIN),
        ];
        for (i, o) in self.outputs.iter().enumerate() {
            if !o.is_eof() {
                entries.push((Token::Output(i), o.fd(), PollFlags::POLLIN));
            }
        }
        for (id, c) in &self.clients {
            let mut ev = PollFlags::empty();
            if c.wants_read() {
                ev |= PollFlags::POLLIN;
            }
            if c.wants_write() {
                ev |= PollFlags::POLLOUT;
            }
            // with no events, POLLHUP still tells a vanished client
            entries.push((Token::Client(*id), c.fd(), ev));
        }
        for (i, e) in self.execs.iter().enumerate() {
            for (stream, fd) in e.session.open_streams() {
                entries.push((Token::Exec(i, stream), fd, PollFlags::POLLIN));
            }
        }
        for (token, fd, ev) in self.attach.poll_entries() {
            entries.push((Token::Attach(token), fd, ev));
        }
        if let Some(fd) = self.oom.watch_fd() {
            entries.push((Token::Oom, fd, PollFlags::POLLIN));
        }
        let tokens: Vec<Token> = entries.iter().map(|e| e.0).collect();
        let mut fds: Vec<PollFd<'_>> = entries
            .into_iter()
            .map(|(_, fd, ev)| PollFd::new(fd, ev))
            .collect();
        poll(&mut fds, timeout)?;
        Ok(tokens
            .into_iter()
            .zip(fds.iter())
            .filter_map(|(t, f)| f.revents().filter(|r| !r.is_empty()).map(|r| (t, r)))
            .collect())
    }

    fn poll_timeout(&self, now: Instant) -> PollTimeout {
        let mut next: Option<Instant> = None;
        let mut consider = |t: Option<Instant>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        };
        if self.init.record.is_none() {
            consider(self.init.exited.as_ref().map(|e| e.drain_until));
        }
        for e in &self.execs {
            consider(e.session.next_wakeup());
        }
        match next {
            None => PollTimeout::NONE,
            Some(t) => {
                // round up so we wake after the deadline, not just before
                let ms = t.saturating_duration_since(now).as_millis() + 1;
                PollTimeout::try_from(ms.min(60_000)).unwrap_or(PollTimeout::MAX)
            }
        }
    }

    fn dispatch(&mut self, token: Token, revents: PollFlags) {
        match token {
            Token::Signal => self.on_sigchld(),
            Token::Oom => self.oom.refresh(),
            Token::Listener => self.accept(),
            Token::Output(i) => {
                if let Some(o) = self.outputs.get_mut(i) {
                    let attach = &mut self.attach;
                    o.pump(&mut self.log, &mut |s, d| attach.broadcast(s, d));
                }
            }
            Token::Client(id) => {
                if let Some(c) = self.clients.get_mut(&id) {
                    if revents.intersects(PollFlags::POLLOUT) {
                        c.flush();
                    }
                    if c.wants_read() && revents.intersects(PollFlags::POLLIN | PollFlags::POLLHUP)
                    {
                        c.read_some();
                    }
                    if revents.intersects(PollFlags::POLLHUP | PollFlags::POLLERR) {
                        c.mark_hangup();
                    }
                }
                self.serve_client(id);
            }
            Token::Exec(i, stream) => {
                if let Some(e) = self.execs.get_mut(i) {
                    e.session.on_readable(stream);
                }
            }
            Token::Attach(t) => self.attach.dispatch(t, revents),
        }
    }

    fn after_events(&mut self, now: Instant) {
        let mut timed_out = Vec::new();
        for e in &mut self.execs {
            if e.session.tick(now) {
                timed_out.push(e.session.pid());
            }
        }
        for pid in timed_out {
            self.backend.kill_exec(pid);
        }
        self.finish_execs(now);
        self.publish_exit(now);
        self.progress_shutdown();
        // answers delivered above may have unblocked queued requests
        let ids: Vec<u64> = self.clients.keys().copied().collect();
        for id in ids {
            self.serve_client(id);
        }
        self.drop_finished_clients();
    }

    fn accept(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => match Conn::new(stream) {
                    Ok(c) => {
                        self.clients.insert(self.next_client, c);
                        self.next_client += 1;
                    }
                    Err(err) => tracing::warn!(%err, "client socket"),
                },
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(err) => {
                    tracing::warn!(%err, "accept failed");
                    return;
                }
            }
        }
    }

    fn drop_finished_clients(&mut self) {
        let finished: Vec<u64> = self
            .clients
            .iter()
            .filter(|(_, c)| c.is_finished())
            .map(|(id, _)| *id)
            .collect();
        let mut gone = Vec::new();
        for id in finished {
            self.clients.remove(&id);
            for e in &mut self.execs {
                if e.client == Some(id) {
                    tracing::info!(
                        pid = e.session.pid(),
                        "exec client went away; killing the process"
                    );
                    e.session.kill();
                    e.client = None;
                    gone.push(e.session.pid());
                }
            }
            for s in &mut self.sessions {
                if s.client == Some(id) {
                    tracing::info!(pid = s.pid, "session client went away; killing the process");
                    s.kill();
                    s.client = None;
                    gone.push(s.pid);
                }
            }
            for pid in gone.drain(..) {
                self.backend.kill_exec(pid);
            }
            if self.shutdown == Some(Some(id)) {
                self.shutdown = Some(None);
            }
        }
    }

    /// Answers the client's queued requests until one is deferred.
    fn serve_client(&mut self, id: u64) {
        loop {
            let Some(line) = self.clients.get_mut(&id).and_then(|c| c.next_line()) else {
                return;
            };
            let response = match line {
                Line::TooLong => Some(Response::error(
                    ErrorCode::BadRequest,
                    "request line too long",
                )),
                Line::Request(bytes) => match serde_json::from_slice::<Request>(&bytes) {
                    Ok(req) => self.handle(id, req),
                    Err(e) => Some(Response::error(ErrorCode::BadRequest, e.to_string())),
                },
            };
            match response {
                Some(r) => {
                    if let Some(c) = self.clients.get_mut(&id) {
                        c.send(&r);
                    }
                }
                None => {
                    if let Some(c) = self.clients.get_mut(&id) {
                        c.set_busy(true);
                    }
                    return;
                }
            }
        }
    }

    /// `None`: the answer comes later (exec, shutdown).
    fn handle(&mut self, client: u64, req: Request) -> Option<Response> {
        tracing::debug!(?req, "request");
        match req {
            Request::Start => Some(self.start()),
            Request::Kill { signal, all } => Some(self.kill(&signal, all)),
            Request::State => Some(Response::State(self.state())),
            Request::ReopenLog => Some(self.reopen_log()),
            Request::Exec(e) => self.exec(client, e),
            Request::Session(s) => self.start_session(client, s),
            Request::Shutdown => self.begin_shutdown(client),
            Request::Checkpoint(c) => Some(self.checkpoint(&c)),
        }
    }

    fn status(&self) -> RunState {
        if self.init.record.is_some() {
            RunState::Stopped
        } else if self.init.started_at.is_some() {
            RunState::Running
        } else {
            RunState::Created
        }
    }
}

/// `kill(2)` with any signal number, real-time ones included.
fn send_signal(pid: i32, sig: i32) -> Result<(), Errno> {
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    let rc = unsafe { nix::libc::kill(pid, sig) };
    Errno::result(rc).map(drop)
}

/// An error and its sources, joined with ": " (libcontainer's top-level
/// messages alone rarely say what went wrong).
pub fn error_chain(err: &dyn std::error::Error) -> String {
    let mut msg = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !msg.contains(&text) {
            msg.push_str(": ");
            msg.push_str(&text);
        }
        source = s.source();
    }
    msg
}

#[cfg(test)]
mod tests;
