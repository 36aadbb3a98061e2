//! Any OCI runtime's command line (runc, crun, youki, runsc), driven the
//! way conmon drives it: `--root`, `create --bundle --pid-file
//! [--console-socket]`, `start`, `state`, `kill [--all]`, `delete
//! [--force]`, `exec --process --pid-file --detach [--console-socket]`,
//! `checkpoint`.
//!
//! The runtime's `create` and `exec --detach` exit once their process
//! runs; the process is then reparented to the shim, the child subreaper
//! ([`crate::daemon::detach`]), which reaps it as any other. The
//! runtime's own messages go to `<shim dir>/runtime.log` (`--log`), whose
//! last lines a failed call quotes.
//!
//! Not here: restore (the shim's CRIU restore is driven for libcontainer),
//! and env values that are not UTF-8 (a `config.json` string cannot carry
//! them): a bundle with a `raw-env` is refused.

use std::ffi::{OsStr, OsString};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::libcontainer::is_systemd_cgroups_path;
use super::{BackendError, ContainerRef, ExecProcess, InitStdio, RuntimeBackend, RuntimeStatus};
use crate::bundle::BundleInfo;

/// An OCI runtime binary driving one container.
pub struct OciCliBackend {
    binary: PathBuf,
    target: ContainerRef,
    /// `--systemd-cgroup`: the spec's cgroupsPath is `slice:prefix:name`.
    systemd_cgroup: bool,
    /// Where the shim keeps the runtime's pid files and log.
    dir: PathBuf,
    /// The bundle has env values a spec cannot carry.
    raw_env: bool,
    /// Whether the runtime is gVisor's runsc (its `--version`), asked once.
    /// runsc's exec'd processes and a pod's containers after its sandbox
    /// container (its subcontainers) live in the gVisor sandbox, not on
    /// the host: see [`Subcontainer`].
    runsc: Option<bool>,
    /// This container joins a runsc sandbox (set at create).
    subcontainer: Option<Subcontainer>,
    /// The in-sandbox pid of each exec'd process still running, by the
    /// pid `exec` returned: what [`RuntimeBackend::kill_exec`] kills.
    exec_pids: std::collections::HashMap<i32, i32>,
}

impl OciCliBackend {
    pub fn new(binary: PathBuf, target: ContainerRef, bundle: &BundleInfo, dir: &Path) -> Self {
        Self {
            binary,
            target,
            systemd_cgroup: bundle
                .cgroups_path
                .as_deref()
                .is_some_and(is_systemd_cgroups_path),
            dir: dir.to_path_buf(),
            raw_env: !bundle.raw_env.is_empty(),
            runsc: None,
            subcontainer: None,
            exec_pids: std::collections::HashMap::new(),
        }
    }

    fn internal_pid_file(&self) -> PathBuf {
        self.dir.join("runtime-internal.pid")
    }

    /// Whether the runtime is runsc: its `--version` says so (runc, crun
    /// and youki name themselves there too).
    fn is_runsc(&mut self) -> bool {
        if let Some(known) = self.runsc {
            return known;
        }
        let known = Command::new(&self.binary)
            .arg("--version")
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .is_ok_and(|out| out.stdout.starts_with(b"runsc"));
        self.runsc = Some(known);
        known
    }

    fn wait_file(&self) -> PathBuf {
        self.dir.join("runtime-wait.json")
    }

    /// `runsc wait <id>`, the shim's child, which exits when the
    /// subcontainer's init does and writes its status to
    /// [`Self::wait_file`].
    fn spawn_waiter(&self) -> Result<i32, BackendError> {
        let out = std::fs::File::create(self.wait_file())
            .map_err(|e| BackendError::io("creating the runtime's wait file", e))?;
        let child = Command::new(&self.binary)
            .args(self.args(&["wait", &self.target.id]))
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| BackendError::io(format!("running {} wait", self.binary.display()), e))?;
        // Reaped by the shim's loop as the init (`init_waiter`).
        i32::try_from(child.id())
            .map_err(|_| BackendError::Message(format!("pid {} out of range", child.id())))
    }

    fn log(&self) -> PathBuf {
        self.dir.join("runtime.log")
    }

    fn pid_file(&self) -> PathBuf {
        self.dir.join("runtime.pid")
    }

    /// The runtime's global flags, then `args`.
    fn args<S: AsRef<OsStr>>(&self, args: &[S]) -> Vec<OsString> {
        let mut all: Vec<OsString> = vec![
            "--root".into(),
            self.target.state_root.clone().into(),
            "--log".into(),
            self.log().into(),
        ];
        if self.systemd_cgroup {
            all.push("--systemd-cgroup".into());
        }
        all.extend(args.iter().map(|a| a.as_ref().to_os_string()));
        all
    }

    /// Runs the runtime with `args` and `stdio` (null where absent);
    /// its stdout when it succeeds.
    fn run<S: AsRef<OsStr>>(
        &self,
        args: &[S],
        stdio: Option<[OwnedFd; 3]>,
    ) -> Result<Vec<u8>, BackendError> {
        let mut command = Command::new(&self.binary);
        command.args(self.args(args));
        let captured = stdio.is_none();
        match stdio {
            Some([stdin, stdout, stderr]) => {
                command
                    .stdin(Stdio::from(stdin))
                    .stdout(Stdio::from(stdout))
                    .stderr(Stdio::from(stderr));
            }
            None => {
                command
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped());
            }
        }
        let what = args
            .first()
            .map(|a| a.as_ref().to_string_lossy().into_owned())
            .unwrap_or_default();
        let output = command
            .output()
            .map_err(|e| BackendError::io(format!("running {}", self.binary.display()), e))?;
        // The fds handed over close with the command: only the runtime's
        // process keeps them.
        drop(command);
        if output.status.success() {
            return Ok(output.stdout);
        }
        let mut message = format!("{} {what}: {}", self.binary.display(), output.status);
        let said = if captured {
            String::from_utf8_lossy(&output.stderr).trim().to_string()
        } else {
            String::new()
        };
        let said = if said.is_empty() {
            last_lines(&std::fs::read_to_string(self.log()).unwrap_or_default(), 3)
        } else {
            said
        };
        if !said.is_empty() {
            message.push_str(": ");
            message.push_str(&said);
        }
        Err(BackendError::Message(message))
    }

    fn read_pid(&self) -> Result<i32, BackendError> {
        let path = self.pid_file();
        let text = std::fs::read_to_string(&path)
            .map_err(|e| BackendError::io(format!("reading {}", path.display()), e))?;
        let _ = std::fs::remove_file(&path);
        text.trim()
            .parse()
            .map_err(|_| BackendError::Message(format!("{}: not a pid: {text:?}", path.display())))
    }
}

/// Where the process's stdio goes: its fds, or null with a console socket.
fn stdio_or_null(stdio: Option<[OwnedFd; 3]>) -> Result<[OwnedFd; 3], BackendError> {
    if let Some(stdio) = stdio {
        return Ok(stdio);
    }
    let null = || -> Result<OwnedFd, BackendError> {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")
            .map(OwnedFd::from)
            .map_err(|e| BackendError::io("/dev/null", e))
    };
    Ok([null()?, null()?, null()?])
}

impl RuntimeBackend for OciCliBackend {
    fn create(&mut self, bundle: &Path, stdio: InitStdio) -> Result<i32, BackendError> {
        if self.raw_env {
            return Err(BackendError::Message(format!(
                "env values that are not UTF-8 cannot be given to {}",
                self.binary.display()
            )));
        }
        let pid_file = self.pid_file();
        let mut args: Vec<OsString> = vec![
            "create".into(),
            "--bundle".into(),
            bundle.into(),
            "--pid-file".into(),
            pid_file.into(),
        ];
        if self.is_runsc() && joins_a_sandbox(bundle) {
            self.subcontainer = Some(Subcontainer::default());
        }
        let stdio = match stdio {
            InitStdio::Pipes {
                stdin,
                stdout,
                stderr,
            } => {
                if let Some(sub) = &mut self.subcontainer {
                    let copy = |fd: &OwnedFd| {
                        fd.try_clone()
                            .map_err(|e| BackendError::io("copying the container's stdio", e))
                    };
                    sub.stdio = Some([copy(&stdin)?, copy(&stdout)?, copy(&stderr)?]);
                }
                Some([stdin, stdout, stderr])
            }
            InitStdio::Console(socket) => {
                args.push("--console-socket".into());
                args.push(socket.into());
                None
            }
        };
        args.push(self.target.id.clone().into());
        self.run(&args, Some(stdio_or_null(stdio)?))?;
        self.read_pid()
    }

    fn start(&mut self) -> Result<(), BackendError> {
        let Some(sub) = &mut self.subcontainer else {
            return self.run(&["start", &self.target.id], None).map(drop);
        };
        // runsc gives a subcontainer the stdio of its `start` (a tty was
        // set up at create); then `runsc wait` stands in for its init.
        let stdio = sub.stdio.take();
        self.run(&["start", &self.target.id], Some(stdio_or_null(stdio)?))?;
        let waiter = self.spawn_waiter()?;
        if let Some(sub) = &mut self.subcontainer {
            sub.waiter = Some(waiter);
        }
        Ok(())
    }

    fn shares_init(&self) -> bool {
        self.subcontainer.is_some()
    }

    fn init_waiter(&self) -> Option<i32> {
        self.subcontainer.as_ref().and_then(|sub| sub.waiter)
    }

    fn init_exit_code(&mut self, code: i32) -> i32 {
        if self.subcontainer.is_none() {
            return code;
        }
        #[derive(serde::Deserialize)]
        struct WaitResult {
            #[serde(rename = "exitStatus")]
            exit_status: i32,
        }
        match std::fs::read(self.wait_file())
            .ok()
            .and_then(|json| serde_json::from_slice::<WaitResult>(&json).ok())
        {
            Some(result) => result.exit_status,
            None => {
                tracing::warn!(
                    code,
                    "`runsc wait` reported no status; its own exit code stands"
                );
                code
            }
        }
    }

    fn state(&mut self) -> Result<RuntimeStatus, BackendError> {
        let out = self.run(&["state", &self.target.id], None)?;
        parse_status(&out)
    }

    fn kill(&mut self, signal: i32, all: bool) -> Result<(), BackendError> {
        let signal = signal.to_string();
        let id = self.target.id.as_str();
        let args: Vec<&str> = if all {
            vec!["kill", "--all", id, &signal]
        } else {
            vec!["kill", id, &signal]
        };
        self.run(&args, None).map(drop)
    }

    fn delete(&mut self, force: bool) -> Result<(), BackendError> {
        let id = self.target.id.as_str();
        let args: Vec<&str> = if force {
            vec!["delete", "--force", id]
        } else {
            vec!["delete", id]
        };
        self.run(&args, None).map(drop)
    }

    fn exec(
        &mut self,
        process: &ExecProcess,
        stdio: [OwnedFd; 3],
        console: Option<&Path>,
    ) -> Result<i32, BackendError> {
        let json = serde_json::to_vec(&process.process)
            .map_err(|e| BackendError::Message(format!("encoding the process: {e}")))?;
        // The exec's whole env (Secrets included): root's alone.
        berth_atomic_file::write_atomic(&process.json_path, &json, 0o600)
            .map_err(|e| BackendError::io("writing the exec's process.json", e))?;
        let mut args: Vec<OsString> = vec![
            "exec".into(),
            "--process".into(),
            process.json_path.clone().into(),
            "--pid-file".into(),
            self.pid_file().into(),
            "--detach".into(),
        ];
        if let Some(socket) = console {
            args.push("--console-socket".into());
            args.push(socket.into());
        }
        let internal = self.is_runsc().then(|| self.internal_pid_file());
        if let Some(path) = &internal {
            let _ = std::fs::remove_file(path);
            args.push("--internal-pid-file".into());
            args.push(path.into());
        }
        args.push(self.target.id.clone().into());
        let result = self.run(&args, Some(stdio)).and_then(|_| self.read_pid());
        let _ = std::fs::remove_file(&process.json_path);
        if let (Ok(pid), Some(path)) = (&result, &internal) {
            match std::fs::read_to_string(path)
                .ok()
                .and_then(|text| text.trim().parse::<i32>().ok())
            {
                Some(inside) => {
                    self.exec_pids.insert(*pid, inside);
                }
                None => tracing::warn!(
                    pid,
                    "the runtime wrote no in-sandbox pid; a kill of this exec reaches only its \
                     host-side process"
                ),
            }
            let _ = std::fs::remove_file(path);
        }
        result
    }

    fn kill_exec(&mut self, pid: i32) {
        let Some(inside) = self.exec_pids.remove(&pid) else {
            return;
        };
        let inside = inside.to_string();
        let args = ["kill", "--pid", &inside, &self.target.id, "9"];
        if let Err(e) = self.run(&args, None) {
            tracing::warn!(pid, inside, error = %e, "killing the exec'd process in the sandbox");
        }
    }

    fn forget_exec(&mut self, pid: i32) {
        self.exec_pids.remove(&pid);
    }

    fn checkpoint(&mut self, images_dir: &Path, work_dir: &Path) -> Result<(), BackendError> {
        let args: Vec<OsString> = vec![
            "checkpoint".into(),
            "--image-path".into(),
            images_dir.into(),
            "--work-path".into(),
            work_dir.into(),
            "--leave-running".into(),
            self.target.id.clone().into(),
        ];
        self.run(&args, None).map(drop)
    }

    fn restore(
        &mut self,
        _input: &crate::checkpoint::RestoreInput<'_>,
    ) -> Result<i32, BackendError> {
        Err(BackendError::Message(format!(
            "restoring a checkpoint is not supported with {}",
            self.binary.display()
        )))
    }
}

/// A runsc container that joins its pod's gVisor sandbox (the pod's
/// sandbox container made it): the pid runsc's `create` writes is the
/// sandbox's, shared by the pod, so the shim neither moves it into this
/// container's cgroups nor waits for it; `runsc wait` does the waiting.
#[derive(Default)]
struct Subcontainer {
    /// The container's stdio, for `start` (where runsc takes it).
    stdio: Option<[OwnedFd; 3]>,
    /// `runsc wait`'s pid, once started.
    waiter: Option<i32>,
}

/// The bundle's spec says its container joins a sandbox another container
/// made (CRI's `container-type: container` with a `sandbox-id`).
fn joins_a_sandbox(bundle: &Path) -> bool {
    #[derive(serde::Deserialize)]
    struct Spec {
        #[serde(default)]
        annotations: std::collections::HashMap<String, String>,
    }
    let Some(spec) = std::fs::read(bundle.join("config.json"))
        .ok()
        .and_then(|json| serde_json::from_slice::<Spec>(&json).ok())
    else {
        return false;
    };
    spec.annotations
        .get("io.kubernetes.cri.container-type")
        .is_some_and(|kind| kind == "container")
        && spec
            .annotations
            .get("io.kubernetes.cri.sandbox-id")
            .is_some_and(|id| !id.is_empty())
}

/// `state`'s `status` (runc, crun, youki and runsc share the format).
fn parse_status(json: &[u8]) -> Result<RuntimeStatus, BackendError> {
    #[derive(serde::Deserialize)]
    struct State {
        status: String,
    }
    let state: State = serde_json::from_slice(json)
        .map_err(|e| BackendError::Message(format!("reading the runtime's state: {e}")))?;
    match state.status.as_str() {
        "creating" => Ok(RuntimeStatus::Creating),
        "created" => Ok(RuntimeStatus::Created),
        "running" => Ok(RuntimeStatus::Running),
        "paused" => Ok(RuntimeStatus::Paused),
        "stopped" => Ok(RuntimeStatus::Stopped),
        other => Err(BackendError::Message(format!(
            "the runtime reports an unknown status {other:?}"
        ))),
    }
}

fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backend(systemd: bool) -> OciCliBackend {
        OciCliBackend {
            binary: "/usr/bin/runc".into(),
            target: ContainerRef {
                id: "c1".into(),
                state_root: "/run/berth/runc".into(),
            },
            systemd_cgroup: systemd,
            dir: "/run/berth/shims/c1".into(),
            raw_env: false,
            runsc: None,
            subcontainer: None,
            exec_pids: std::collections::HashMap::new(),
        }
    }

    #[test]
    fn a_container_of_a_pod_with_a_sandbox_container_joins_it() {
        let dir = tempfile::tempdir().unwrap();
        let spec = |kind: &str| {
            format!(
                r#"{{"ociVersion":"1.2.0","annotations":{{
                    "io.kubernetes.cri.container-type":"{kind}",
                    "io.kubernetes.cri.sandbox-id":"p1"}}}}"#
            )
        };
        std::fs::write(dir.path().join("config.json"), spec("container")).unwrap();
        assert!(joins_a_sandbox(dir.path()));
        // The sandbox container makes the sandbox; it joins none.
        std::fs::write(dir.path().join("config.json"), spec("sandbox")).unwrap();
        assert!(!joins_a_sandbox(dir.path()));
        std::fs::write(dir.path().join("config.json"), r#"{"ociVersion":"1.2.0"}"#).unwrap();
        assert!(!joins_a_sandbox(dir.path()));
        assert!(!joins_a_sandbox(&dir.path().join("missing")));
    }

    #[test]
    fn global_flags_come_first() {
        let args = backend(false).args(&["state", "c1"]);
        assert_eq!(
            args,
            [
                "--root",
                "/run/berth/runc",
                "--log",
                "/run/berth/shims/c1/runtime.log",
                "state",
                "c1"
            ]
        );
        assert!(backend(true)
            .args(&["start", "c1"])
            .contains(&OsString::from("--systemd-cgroup")));
    }

    #[test]
    fn states_of_every_runtime_are_read() {
        let state =
            br#"{"ociVersion":"1.2.0","id":"c1","pid":42,"status":"running","bundle":"/b"}"#;
        assert_eq!(parse_status(state).unwrap(), RuntimeStatus::Running);
        assert_eq!(
            parse_status(br#"{"status":"stopped"}"#).unwrap(),
            RuntimeStatus::Stopped
        );
        assert!(parse_status(br#"{"status":"odd"}"#).is_err());
        assert!(parse_status(b"not json").is_err());
    }

    #[test]
    fn a_failed_call_quotes_the_runtime() {
        let b = OciCliBackend {
            binary: "/bin/sh".into(),
            ..backend(false)
        };
        // sh takes --root as an option it does not know and says so.
        let err = b.run(&["state"], None).expect_err("sh fails");
        let text = err.to_string();
        assert!(text.starts_with("/bin/sh state: exit status: 2"), "{text}");
        assert!(text.len() > "/bin/sh state: exit status: 2".len(), "{text}");
    }

    #[test]
    fn the_last_lines_of_a_log() {
        assert_eq!(last_lines("a\n\nb\nc\nd\n", 3), "b; c; d");
        assert_eq!(last_lines("", 3), "");
    }
}
