//! Test support: busybox bundles, spawning the shim the way berthd will,
//! and cleanup guards. Needs root (real libcontainer, real cgroups).

#![allow(dead_code)]

use std::fs;
use std::io::Read;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use berth_shim_api::client;
use berth_shim_api::protocol::{ExitRecord, Ready, Request, Response, RunState, StateInfo};
use serde_json::json;

pub const SHIM: &str = env!("CARGO_BIN_EXE_berth-shim");

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// The busybox the rootfs gets: `$BERTH_TEST_BUSYBOX`, else the host's
/// (`busybox-static`, or Debian's dynamic `busybox` plus the libraries
/// `ldd` names).
fn busybox() -> PathBuf {
    if let Ok(p) = std::env::var("BERTH_TEST_BUSYBOX") {
        return PathBuf::from(p);
    }
    for p in ["/bin/busybox", "/usr/bin/busybox"] {
        if Path::new(p).exists() {
            return PathBuf::from(p);
        }
    }
    panic!("no busybox: install busybox or busybox-static, or set BERTH_TEST_BUSYBOX");
}

/// Libraries a dynamic binary needs (none for a static one).
fn shared_libs(bin: &Path) -> Vec<PathBuf> {
    let out = Command::new("ldd").arg(bin).output().expect("run ldd");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            l.split_whitespace()
                .find(|w| w.starts_with('/'))
                .map(PathBuf::from)
        })
        .collect()
}

/// A minimal rootfs: busybox with a symlink per applet.
pub fn make_rootfs(rootfs: &Path) {
    let bb = busybox();
    let bin = rootfs.join("bin");
    for d in ["bin", "proc", "dev", "tmp", "etc"] {
        fs::create_dir_all(rootfs.join(d)).expect("mkdir rootfs");
    }
    fs::copy(&bb, bin.join("busybox")).expect("copy busybox");
    for lib in shared_libs(&bb) {
        let dest = rootfs.join(lib.strip_prefix("/").expect("absolute lib"));
        fs::create_dir_all(dest.parent().expect("lib dir")).expect("mkdir lib");
        fs::copy(&lib, &dest).expect("copy lib");
    }
    let list = Command::new(&bb)
        .arg("--list")
        .output()
        .expect("busybox --list");
    for applet in String::from_utf8_lossy(&list.stdout).lines() {
        if applet != "busybox" && !applet.contains('/') && !applet.is_empty() {
            let _ = symlink("busybox", bin.join(applet));
        }
    }
}

/// How a test container is made.
#[derive(Clone)]
pub struct Options {
    pub args: Vec<String>,
    pub tty: bool,
    /// `--stdin` / `--stdin-once`.
    pub stdin: bool,
    pub stdin_once: bool,
    pub log: bool,
    pub memory_limit: Option<i64>,
    pub no_new_privileges: bool,
    /// Bounding/effective/permitted set; None leaves root's full set.
    pub capabilities: Option<Vec<String>>,
    pub seccomp: Option<serde_json::Value>,
    /// uid, gid, additional gids.
    pub user: (u32, u32, Vec<u32>),
    /// `--runtime-binary`: an OCI runtime binary instead of libcontainer.
    pub runtime_binary: Option<PathBuf>,
}

impl Options {
    pub fn new(args: &[&str]) -> Self {
        Self {
            args: args.iter().map(|s| s.to_string()).collect(),
            tty: false,
            stdin: false,
            stdin_once: false,
            log: true,
            memory_limit: None,
            no_new_privileges: true,
            capabilities: None,
            seccomp: None,
            user: (0, 0, vec![]),
            runtime_binary: None,
        }
    }
}

fn config_json(opts: &Options, cgroup: &str) -> serde_json::Value {
    let mut mounts = vec![
        json!({"destination": "/proc", "type": "proc", "source": "proc"}),
        json!({"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
               "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]}),
    ];
    // every container has one, as berth-spec gives it: tty exec sessions
    // open their pty there
    mounts.push(
        json!({"destination": "/dev/pts", "type": "devpts", "source": "devpts",
        "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]}),
    );
    let mut linux = json!({
        "cgroupsPath": cgroup,
        "namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "uts"},
                       {"type": "mount"}, {"type": "network"}],
    });
    if let Some(limit) = opts.memory_limit {
        linux["resources"] = json!({"memory": {"limit": limit, "swap": limit}});
    }
    if let Some(seccomp) = &opts.seccomp {
        linux["seccomp"] = seccomp.clone();
    }
    let mut process = json!({
        "terminal": opts.tty,
        "user": {"uid": opts.user.0, "gid": opts.user.1, "additionalGids": opts.user.2},
        "args": opts.args,
        "env": ["PATH=/bin", "HOME=/"],
        "cwd": "/",
    });
    // libcontainer 0.7 quirk: an explicit `false` makes it load seccomp
    // after dropping capabilities, which fails without CAP_SYS_ADMIN; only
    // an absent field takes the early path
    if opts.no_new_privileges {
        process["noNewPrivileges"] = json!(true);
    }
    if let Some(caps) = &opts.capabilities {
        process["capabilities"] = json!({"bounding": caps, "effective": caps, "permitted": caps});
    }
    json!({
        "ociVersion": "1.0.2",
        "process": process,
        "root": {"path": "rootfs"},
        "hostname": "shimtest",
        "mounts": mounts,
        "linux": linux,
    })
}

/// A container made by a shim, cleaned up on drop.
pub struct TestContainer {
    pub tmp: tempfile::TempDir,
    pub id: String,
    pub cgroup: String,
    pub opts: Options,
    pub ready: Option<Ready>,
    /// The launcher's stderr.
    pub launcher_stderr: String,
    pub launcher_status: Option<i32>,
}

impl TestContainer {
    /// Prepares the bundle (does not run the shim).
    pub fn prepare(opts: Options) -> Self {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id();
        let tmp = tempfile::Builder::new()
            .prefix("berth-shimtest-")
            .tempdir()
            .expect("tempdir");
        let id = format!("shimtest-{pid}-{n}");
        let cgroup = format!("/berth-shimtest-{pid}-{n}");
        let bundle = tmp.path().join("bundle");
        make_rootfs(&bundle.join("rootfs"));
        let cfg = config_json(&opts, &cgroup);
        fs::write(
            bundle.join("config.json"),
            serde_json::to_vec_pretty(&cfg).expect("json"),
        )
        .expect("write config");
        fs::create_dir_all(tmp.path().join("logs")).expect("mkdir logs");
        Self {
            tmp,
            id,
            cgroup,
            opts,
            ready: None,
            launcher_stderr: String::new(),
            launcher_status: None,
        }
    }

    /// Bundle + shim: the container is created (or the test fails).
    pub fn create(opts: Options) -> Self {
        let mut c = Self::prepare(opts);
        let ready = c.spawn_shim();
        assert!(ready.ok, "create failed: {ready:?} {}", c.launcher_stderr);
        c
    }

    pub fn bundle(&self) -> PathBuf {
        self.tmp.path().join("bundle")
    }
    pub fn state_root(&self) -> PathBuf {
        self.tmp.path().join("state")
    }
    pub fn dir(&self) -> PathBuf {
        self.tmp.path().join("shim")
    }
    pub fn log_path(&self) -> PathBuf {
        self.tmp.path().join("logs/c.log")
    }
    pub fn socket(&self) -> PathBuf {
        self.dir().join("shim.sock")
    }
    pub fn attach_socket(&self) -> PathBuf {
        self.dir().join("attach.sock")
    }

    pub fn shim_args(&self) -> Vec<String> {
        let mut a = vec![
            "--id".into(),
            self.id.clone(),
            "--bundle".into(),
            self.bundle().display().to_string(),
            "--state-root".into(),
            self.state_root().display().to_string(),
            "--dir".into(),
            self.dir().display().to_string(),
        ];
        if self.opts.log {
            a.push("--log".into());
            a.push(self.log_path().display().to_string());
        }
        if self.opts.tty {
            a.push("--tty".into());
        }
        if self.opts.stdin {
            a.push("--stdin".into());
        }
        if self.opts.stdin_once {
            a.push("--stdin-once".into());
        }
        if let Some(binary) = &self.opts.runtime_binary {
            a.push("--runtime-binary".into());
            a.push(binary.display().to_string());
        }
        a
    }

    /// Runs the shim as berthd will: read stdout to EOF, then reap the
    /// launcher. Fails the test if that takes more than 30 s (a leaked
    /// stdout would hang here).
    pub fn spawn_shim(&mut self) -> Ready {
        let mut child = Command::new(SHIM)
            .args(self.shim_args())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn shim");
        let mut stdout = child.stdout.take().expect("stdout");
        let mut stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut out = String::new();
            let mut err = String::new();
            let _ = stdout.read_to_string(&mut out);
            let _ = stderr.read_to_string(&mut err);
            let _ = tx.send((out, err));
        });
        let (out, err) = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("shim stdout/stderr never reached EOF");
        let status = child.wait().expect("wait launcher");
        self.launcher_stderr = err;
        self.launcher_status = status.code();
        let line = out.lines().next().unwrap_or_default().to_string();
        assert_eq!(
            out.lines().count(),
            1,
            "exactly one readiness line: {out:?}"
        );
        let ready: Ready = serde_json::from_str(&line).expect("readiness line is JSON");
        self.ready = Some(ready.clone());
        ready
    }

    pub fn init_pid(&self) -> i32 {
        self.ready.as_ref().and_then(|r| r.pid).expect("init pid")
    }

    pub fn shim_pid(&self) -> i32 {
        self.ready
            .as_ref()
            .and_then(|r| r.shim_pid)
            .expect("shim pid")
    }

    pub fn call(&self, req: &Request) -> Response {
        client::call(&self.socket(), req, Some(Duration::from_secs(30))).expect("shim call")
    }

    pub fn state(&self) -> StateInfo {
        match self.call(&Request::State) {
            Response::State(s) => s,
            other => panic!("state: {other:?}"),
        }
    }

    pub fn start(&self) {
        assert_eq!(self.call(&Request::Start), Response::Ok);
    }

    pub fn wait_stopped(&self, timeout: Duration) -> StateInfo {
        let mut last = None;
        wait_until(timeout, || {
            let s = self.state();
            let done = s.status == RunState::Stopped;
            last = Some(s);
            done
        });
        last.expect("state")
    }

    pub fn exit_record(&self) -> ExitRecord {
        let text = fs::read(self.dir().join("exit")).expect("exit file");
        serde_json::from_slice(&text).expect("exit json")
    }

    pub fn log(&self) -> String {
        fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    pub fn shim_log(&self) -> String {
        fs::read_to_string(self.dir().join("shim.log")).unwrap_or_default()
    }

    /// Cgroup directories of this container, in every hierarchy.
    pub fn cgroup_dirs(&self) -> Vec<PathBuf> {
        let rel = self.cgroup.trim_start_matches('/');
        let mut v = Vec::new();
        if let Ok(rd) = fs::read_dir("/sys/fs/cgroup") {
            for e in rd.flatten() {
                let d = e.path().join(rel);
                if d.is_dir() {
                    v.push(d);
                }
            }
        }
        if Path::new("/sys/fs/cgroup").join(rel).is_dir() {
            v.push(Path::new("/sys/fs/cgroup").join(rel));
        }
        v
    }

    fn cleanup(&mut self) {
        let Some(ready) = self.ready.clone() else {
            return;
        };
        if !ready.ok {
            return;
        }
        if self.socket().exists() {
            let _ = client::call(
                &self.socket(),
                &Request::Shutdown,
                Some(Duration::from_secs(20)),
            );
        }
        // whatever is left: processes of our cgroup, our init, our shim
        for d in self.cgroup_dirs() {
            if let Ok(procs) = fs::read_to_string(d.join("cgroup.procs")) {
                for pid in procs.lines().filter_map(|p| p.trim().parse::<i32>().ok()) {
                    kill(pid, 9);
                }
            }
        }
        if let Some(pid) = ready.pid {
            if process_in_cgroup(pid, &self.cgroup) {
                kill(pid, 9);
            }
        }
        if let Some(pid) = ready.shim_pid {
            if is_our_shim(pid, &self.id) {
                kill(pid, 9);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        for d in self.cgroup_dirs() {
            while fs::remove_dir(&d).is_err() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let _ = fs::remove_dir_all(self.state_root().join(&self.id));
    }
}

impl Drop for TestContainer {
    fn drop(&mut self) {
        self.cleanup();
    }
}

pub fn kill(pid: i32, sig: i32) -> bool {
    let Ok(sig) = nix::sys::signal::Signal::try_from(sig) else {
        return false;
    };
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig).is_ok()
}

pub fn alive(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        // state is the field after the ")" of the command name
        Ok(stat) => stat
            .rsplit_once(") ")
            .map(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X'))
            .unwrap_or(false),
        Err(_) => false,
    }
}

fn process_in_cgroup(pid: i32, cgroup: &str) -> bool {
    fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .map(|c| c.lines().any(|l| l.ends_with(cgroup)))
        .unwrap_or(false)
}

fn is_our_shim(pid: i32, id: &str) -> bool {
    fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| {
            let text = String::from_utf8_lossy(&c);
            text.contains("berth-shim") && text.split('\0').any(|a| a == id)
        })
        .unwrap_or(false)
}

pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "condition not met within {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `2016-10-06T00:17:09.669794202Z`
pub fn is_rfc3339_nano(ts: &str) -> bool {
    let b = ts.as_bytes();
    if b.len() != 30 {
        return false;
    }
    b.iter().enumerate().all(|(i, &c)| match i {
        4 | 7 => c == b'-',
        10 => c == b'T',
        13 | 16 => c == b':',
        19 => c == b'.',
        29 => c == b'Z',
        _ => c.is_ascii_digit(),
    })
}

/// A CRI log record split into (timestamp, stream, tag, content).
pub fn parse_record(line: &str) -> (&str, &str, &str, &str) {
    let mut it = line.splitn(4, ' ');
    let ts = it.next().expect("timestamp");
    let stream = it.next().expect("stream");
    let tag = it.next().expect("tag");
    let content = it.next().unwrap_or("");
    (ts, stream, tag, content)
}
