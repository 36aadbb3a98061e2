//! Talking to a container's berth-shim: starting it (fork+exec, never a
//! fork of berthd itself) and calling it over its socket.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::shim_signals::ShimSignals;
use super::state_cache::ShimWatch;
use super::{shim_log, ContainerError};
use berth_shim_api::files::ShimFiles;
use berth_shim_api::protocol::{ExitRecord, Ready, Request, Response, RunState, StateInfo};
use tokio::io::AsyncReadExt;

/// How long a shim may take to create its container.
pub const CREATE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long one control call may take (exec has its own timeout on top).
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// What a shim needs to create one container.
pub struct ShimLaunch<'a> {
    pub binary: &'a crate::helper_binary::HelperBinary,
    pub id: &'a str,
    pub bundle: &'a Path,
    /// The runtime's state root (`--root` of a runtime binary).
    pub state_root: &'a Path,
    /// The OCI runtime binary the shim drives (its `--runtime-binary`);
    /// None: libcontainer inside the shim, the default handler.
    pub runtime_binary: Option<&'a Path>,
    pub dir: &'a Path,
    pub log: Option<&'a Path>,
    pub tty: bool,
    /// CRI `stdin` / `stdin_once`: the shim keeps the container's stdin
    /// for attachers.
    pub stdin: bool,
    pub stdin_once: bool,
    /// Where the shim's log is kept if the container cannot be created
    /// (the shim's dir goes with the failed create).
    pub kept_log: &'a Path,
    /// How long the create may take ([`CREATE_TIMEOUT`] but in tests).
    pub timeout: Duration,
    /// An unpacked checkpoint whose processes `start` restores.
    pub restore: Option<&'a Path>,
    /// The container's cgroup dir in each hierarchy (cgroupfs paths; empty
    /// for a systemd scope): the shim signals and removes the cgroup there.
    pub cgroup_dirs: &'a [PathBuf],
    /// berth's state dir when it is a mount of its own: the shim creates
    /// the container in a mount table trimmed to what its spec names there.
    pub trim_mounts: Option<&'a Path>,
}

/// Starts a shim and waits until it reports the container created. Returns
/// the container's init pid.
pub async fn launch(launch: &ShimLaunch<'_>) -> Result<i32, ContainerError> {
    let mut command = launch.binary.command();
    command
        .arg("--id")
        .arg(launch.id)
        .arg("--bundle")
        .arg(launch.bundle)
        .arg("--state-root")
        .arg(launch.state_root)
        .arg("--dir")
        .arg(launch.dir)
        // Dies with berthd until created (berth-shim's daemon.rs). The
        // kernel ties it to the spawning thread, a runtime worker here,
        // which lives as long as berthd.
        .arg("--parent-pid")
        .arg(std::process::id().to_string());
    if let Some(runtime) = launch.runtime_binary {
        command.arg("--runtime-binary").arg(runtime);
    }
    if let Some(log) = launch.log {
        command.arg("--log").arg(log);
    }
    if launch.tty {
        command.arg("--tty");
    }
    if let Some(dir) = launch.restore {
        command.arg("--restore").arg(dir);
    }
    for dir in launch.cgroup_dirs {
        command.arg("--cgroup-dir").arg(dir);
    }
    if let Some(dir) = launch.trim_mounts {
        command.arg("--trim-mounts").arg(dir);
    }
    if launch.stdin {
        command.arg("--stdin");
        if launch.stdin_once {
            command.arg("--stdin-once");
        }
    }
    command
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(false);
    let mut child = command
        .spawn()
        .map_err(|source| ContainerError::ShimSpawn {
            binary: launch.binary.path().to_path_buf(),
            source,
        })?;
    let mut stdout = child
        .stdout
        .take()
        .ok_or_else(|| ContainerError::ShimSpawn {
            binary: launch.binary.path().to_path_buf(),
            source: std::io::Error::other("its stdout was not piped"),
        })?;
    let mut answer = String::new();
    let read = tokio::time::timeout(launch.timeout, stdout.read_to_string(&mut answer)).await;
    if read.is_err() {
        // The launcher still waits for its daemon, so waiting for it would
        // hang this create for good: kill it (its daemon dies with it, see
        // berth-shim's daemon.rs), then reap it.
        if let Err(err) = child.start_kill() {
            tracing::warn!(id = launch.id, error = %err, "killing a hung shim");
        }
        let _ = child.wait().await;
        let log = ShimFiles::new(launch.dir.to_path_buf()).log();
        let kept = shim_log::keep(&log, launch.kept_log)
            .ok()
            .map(|()| launch.kept_log);
        return Err(ContainerError::CreateTimedOut {
            id: launch.id.to_string(),
            message: shim_log::with_reason(
                &format!(
                    "container {} was not created within {:?}; its shim was killed",
                    launch.id, launch.timeout
                ),
                &log,
                kept,
            ),
        });
    }
    // The shim detaches (its own session); the process berthd started exits
    // once the handshake is written, and is reaped here.
    let _ = child.wait().await;
    let ready = match read {
        Err(_) => Err("timed out".to_string()),
        Ok(Err(err)) => Err(format!("reading the shim's handshake: {err}")),
        Ok(Ok(_)) => serde_json::from_str::<Ready>(answer.trim())
            .map_err(|err| format!("shim handshake {answer:?}: {err}")),
    };
    let reason = match ready {
        Ok(Ready {
            ok: true,
            pid: Some(pid),
            ..
        }) => return Ok(pid),
        Ok(ready) => format!(
            "creating container {}: {}",
            launch.id,
            ready
                .error
                .unwrap_or_else(|| "shim gave no reason".to_string())
        ),
        Err(reason) => reason,
    };
    Err(failed_create(launch, &reason))
}

/// The error of a create the shim could not do, with the reason from its
/// log. The container cannot be made as configured on this node, so
/// FailedPrecondition (kubelet shows the message as CreateContainerError).
fn failed_create(launch: &ShimLaunch<'_>, reason: &str) -> ContainerError {
    let log = ShimFiles::new(launch.dir.to_path_buf()).log();
    let kept = match shim_log::keep(&log, launch.kept_log) {
        Ok(()) => Some(launch.kept_log),
        Err(err) => {
            tracing::warn!(error = %err, log = %log.display(), "cannot keep the shim log");
            None
        }
    };
    ContainerError::CreateFailed {
        id: launch.id.to_string(),
        message: shim_log::with_reason(reason, &log, kept),
    }
}

/// The shim's log of container `dir`, kept with the container.
pub fn log_path(dir: &Path) -> PathBuf {
    ShimFiles::new(dir.to_path_buf()).log()
}

/// `extra` for a call that waits as long as the shim takes (ExecSync
/// without a timeout, which CRI runs until it ends): only its caller
/// dropping the call ends it, which closes the connection, and the shim
/// kills an exec whose client went away.
pub const UNTIL_ANSWERED: Duration = Duration::MAX;

/// One call to the shim of `dir`: a request line and its answer line on a
/// connection of its own, within `CALL_TIMEOUT + extra`. Dropping the
/// future closes the connection.
pub async fn call(
    dir: &Path,
    request: Request,
    extra: Duration,
) -> Result<Response, std::io::Error> {
    let socket = ShimFiles::new(dir.to_path_buf()).socket();
    let exchange = exchange(&socket, &request);
    match CALL_TIMEOUT.checked_add(extra) {
        Some(limit) => tokio::time::timeout(limit, exchange).await.map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer within {} s", limit.as_secs()),
            )
        })?,
        None => exchange.await,
    }
}

async fn exchange(socket: &Path, request: &Request) -> std::io::Result<Response> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let mut stream = tokio::io::BufReader::new(tokio::net::UnixStream::connect(socket).await?);
    let mut line = serde_json::to_vec(request).map_err(std::io::Error::other)?;
    line.push(b'\n');
    stream.get_mut().write_all(&line).await?;
    let mut answer = String::new();
    if stream.read_line(&mut answer).await? == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "shim closed the connection",
        ));
    }
    serde_json::from_str(&answer)
        .map_err(|err| std::io::Error::new(std::io::ErrorKind::InvalidData, err))
}

/// The container's state: from the live shim, else from its exit file.
pub async fn state(dir: &Path) -> Option<StateInfo> {
    match call(dir, Request::State, Duration::ZERO).await {
        Ok(Response::State(state)) => Some(state),
        _ => exit_state(dir),
    }
}

/// A shim's process, through a pidfd, and its exit file: what says that
/// the state it gave may be old.
pub struct ProcessWatch {
    pidfd: OwnedFd,
    exit: PathBuf,
}

impl ShimWatch for ProcessWatch {
    fn moved(&self) -> bool {
        // An error polling the pidfd counts as moved, which only costs a
        // call to the shim.
        self.exit.exists() || crate::pidfd::exited(&self.pidfd)
    }
}

/// The pid the shim of `dir` wrote in its pid file, if any.
pub fn recorded_pid(dir: &Path) -> Option<i32> {
    let text = std::fs::read_to_string(ShimFiles::new(dir.to_path_buf()).shim_pid()).ok()?;
    text.trim().parse().ok().filter(|pid| *pid > 0)
}

/// A watch on the shim of `dir`, from its pid file. Taken before the shim
/// is asked for its state: an answer then proves the pid was still the
/// shim's when the pidfd was opened. Through `signals` where it can be
/// (one system call a read for every container), else a [`ProcessWatch`].
/// None if there is no pid or no fd left.
pub fn watch(dir: &Path, signals: Option<&ShimSignals>) -> Option<Box<dyn ShimWatch>> {
    let mut pidfd = crate::pidfd::open(recorded_pid(dir)?)?;
    if let Some(signals) = signals {
        match signals.watch(dir, pidfd) {
            Ok(watch) => return Some(Box::new(watch)),
            Err(back) => pidfd = back,
        }
    }
    Some(Box::new(ProcessWatch {
        pidfd,
        exit: ShimFiles::new(dir.to_path_buf()).exit(),
    }))
}

/// The state a shim left in its exit file, for a shim that is gone.
pub fn exit_state(dir: &Path) -> Option<StateInfo> {
    let path: PathBuf = ShimFiles::new(dir.to_path_buf()).exit();
    let bytes = std::fs::read(path).ok()?;
    let exit: ExitRecord = serde_json::from_slice(&bytes).ok()?;
    Some(StateInfo {
        id: String::new(),
        status: RunState::Stopped,
        pid: 0,
        created_at: String::new(),
        started_at: None,
        exit_code: Some(exit.exit_code),
        exited_at: Some(exit.exited_at),
        oom_killed: exit.oom_killed,
        unknown: exit.unknown,
    })
}

/// Exit code of a container whose end was not seen, as containerd reports.
pub const UNKNOWN_EXIT_CODE: i32 = 255;

/// Writes the exit file of a container whose shim is gone, once berthd
/// killed its processes: from then on it is exited, with code 255 and
/// reason unknown, as containerd reports such a container.
pub fn record_unknown_exit(dir: &Path) -> std::io::Result<()> {
    let record = ExitRecord {
        exit_code: UNKNOWN_EXIT_CODE,
        exited_at: berth_shim_api::timestamp::now(),
        oom_killed: false,
        unknown: true,
    };
    let bytes = serde_json::to_vec(&record).map_err(std::io::Error::other)?;
    berth_atomic_file::write_atomic(&ShimFiles::new(dir.to_path_buf()).exit(), &bytes, 0o644)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::container::shim_signals::Sleeper;
    use std::os::unix::fs::PermissionsExt;

    /// The real watch, on a real process: still until its exit file
    /// appears, or until its process ends.
    #[test]
    fn a_process_watch_sees_the_exit_file_and_the_end_of_the_process() {
        let tmp = tempfile::tempdir().unwrap();
        let files = ShimFiles::new(tmp.path().to_path_buf());
        let mut shim = Sleeper::start();
        std::fs::write(files.shim_pid(), shim.pid().to_string()).unwrap();
        let signals = ShimSignals::new().unwrap();
        // Through the shared fds, and on its own (the fallback).
        let shared = watch(tmp.path(), Some(&signals)).unwrap();
        let own = watch(tmp.path(), None).unwrap();
        assert!(!shared.moved() && !own.moved());
        std::fs::write(files.exit(), b"{}").unwrap();
        assert!(shared.moved() && own.moved());
        std::fs::remove_file(files.exit()).unwrap();
        assert!(!own.moved());
        drop(shared);
        let shared = watch(tmp.path(), Some(&signals)).unwrap();
        assert!(!shared.moved());
        shim.end();
        assert!(shared.moved() && own.moved());
        // No pid file: no watch, so nothing live is kept.
        std::fs::remove_file(files.shim_pid()).unwrap();
        assert!(super::watch(tmp.path(), Some(&signals)).is_none());
    }

    /// A shim that never answers: the create must fail at its timeout, and
    /// the process berthd started must be gone.
    #[tokio::test]
    async fn a_hung_shim_times_out_and_is_killed() {
        let tmp = tempfile::tempdir().unwrap();
        let pid_file = tmp.path().join("pid");
        let binary = tmp.path().join("hung-shim");
        std::fs::write(
            &binary,
            format!(
                "#!/bin/sh\necho $$ > {}\nexec sleep 600\n",
                pid_file.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755)).unwrap();
        let dir = tmp.path().join("shim");
        std::fs::create_dir(&dir).unwrap();
        let started = std::time::Instant::now();
        // A script: through a view's close-on-exec fd its interpreter could
        // not open it.
        let binary = crate::helper_binary::HelperBinary::unprotected(binary);
        let err = launch(&ShimLaunch {
            binary: &binary,
            id: "c1",
            bundle: tmp.path(),
            state_root: tmp.path(),
            runtime_binary: None,
            dir: &dir,
            log: None,
            tty: false,
            stdin: false,
            stdin_once: false,
            kept_log: &tmp.path().join("kept.log"),
            timeout: Duration::from_secs(1),
            restore: None,
            cgroup_dirs: &[],
            trim_mounts: None,
        })
        .await
        .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(10), "{err}");
        assert!(
            matches!(err, ContainerError::CreateTimedOut { .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains("was not created within"), "{err}");
        let pid = std::fs::read_to_string(&pid_file).unwrap();
        let proc_dir = PathBuf::from(format!("/proc/{}", pid.trim()));
        assert!(!proc_dir.exists(), "the hung shim {pid} still runs");
    }

    /// A shim socket in `dir` that reads one request line, waits `delay`
    /// and answers `ok`; it reports whether the connection was closed
    /// before the answer went out.
    fn slow_shim(dir: &Path, delay: Duration) -> tokio::task::JoinHandle<bool> {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
        let listener = tokio::net::UnixListener::bind(ShimFiles::new(dir.to_path_buf()).socket())
            .expect("bind");
        tokio::spawn(async move {
            let (stream, _) = listener.accept().await.expect("accept");
            let mut stream = tokio::io::BufReader::new(stream);
            let mut request = String::new();
            stream.read_line(&mut request).await.expect("request");
            let mut rest = String::new();
            tokio::select! {
                _ = tokio::time::sleep(delay) => {
                    let answer = serde_json::to_vec(&Response::Ok).expect("json");
                    let _ = stream.get_mut().write_all(&answer).await;
                    let _ = stream.get_mut().write_all(b"\n").await;
                    false
                }
                read = stream.read_line(&mut rest) => matches!(read, Ok(0)),
            }
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_until_answered_outlasts_the_call_timeout() {
        let tmp = tempfile::tempdir().unwrap();
        let shim = slow_shim(tmp.path(), CALL_TIMEOUT * 3);
        let answer = call(tmp.path(), Request::State, UNTIL_ANSWERED).await;
        assert!(matches!(answer, Ok(Response::Ok)), "{answer:?}");
        assert!(!shim.await.unwrap(), "the connection stayed open");
    }

    #[tokio::test(start_paused = true)]
    async fn a_bounded_call_times_out() {
        let tmp = tempfile::tempdir().unwrap();
        let _shim = slow_shim(tmp.path(), CALL_TIMEOUT * 3);
        let err = call(tmp.path(), Request::State, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "{err}");
    }

    #[tokio::test(start_paused = true)]
    async fn dropping_a_call_closes_its_connection() {
        let tmp = tempfile::tempdir().unwrap();
        let shim = slow_shim(tmp.path(), CALL_TIMEOUT * 100);
        let dir = tmp.path().to_path_buf();
        let caller = tokio::spawn(async move { call(&dir, Request::State, UNTIL_ANSWERED).await });
        tokio::time::sleep(Duration::from_secs(1)).await;
        caller.abort();
        assert!(shim.await.unwrap(), "the shim saw the caller go away");
    }
}
