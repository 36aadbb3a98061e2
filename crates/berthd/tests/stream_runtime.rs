//! `ContainerStreams` against real shims running real busybox containers
//! (root, cgroups; the berth-shim binary must be built next to this test:
//! `cargo build -p berth-shim`). The containers are made the way berthd
//! makes them, minus the image: a bundle, a shim, a record in the store.

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_shim_api::protocol::{Request, RunState, SignalArg};
use berth_stream::{
    AttachSpec, ExecSpec, SessionError, SessionStreams, StreamRuntime, TerminalSize,
};
use berthd::container::shim::{self, ShimLaunch};
use berthd::container::store::{ContainerRecord, ContainerStore};
use berthd::container::ContainerManager;
use berthd::sandbox::store::{SandboxRecord, SandboxState, SandboxStore};
use berthd::sandbox::SandboxManager;
use berthd::stream_runtime::ContainerStreams;
use cri_api::v1::{
    ContainerConfig, LinuxPodSandboxConfig, LinuxSandboxSecurityContext, NamespaceMode,
    NamespaceOption, PodSandboxConfig,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::sync::mpsc;

const T: Duration = Duration::from_secs(20);
static COUNTER: AtomicU32 = AtomicU32::new(0);

/// target/<profile>/deps/<test> → target/<profile>/berth-shim
fn shim_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("test exe");
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .expect("target dir")
        .join("berth-shim");
    assert!(
        bin.exists(),
        "{} is missing: cargo build -p berth-shim",
        bin.display()
    );
    bin
}

fn make_rootfs(rootfs: &Path) {
    let bb = Path::new("/bin/busybox");
    assert!(bb.exists(), "busybox is needed for these tests");
    for d in ["bin", "proc", "dev", "tmp", "etc"] {
        fs::create_dir_all(rootfs.join(d)).expect("mkdir rootfs");
    }
    fs::copy(bb, rootfs.join("bin/busybox")).expect("copy busybox");
    let ldd = Command::new("ldd").arg(bb).output().expect("ldd");
    for lib in String::from_utf8_lossy(&ldd.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().find(|w| w.starts_with('/')))
    {
        let dest = rootfs.join(lib.trim_start_matches('/'));
        fs::create_dir_all(dest.parent().expect("lib dir")).expect("mkdir lib");
        fs::copy(lib, &dest).expect("copy lib");
    }
    let list = Command::new(bb).arg("--list").output().expect("list");
    for applet in String::from_utf8_lossy(&list.stdout).lines() {
        if !applet.is_empty() && applet != "busybox" && !applet.contains('/') {
            let _ = symlink("busybox", rootfs.join("bin").join(applet));
        }
    }
}

fn config_json(args: &[&str], tty: bool, cgroup: &str) -> serde_json::Value {
    serde_json::json!({
        "ociVersion": "1.0.2",
        "process": {
            "terminal": tty,
            "user": {"uid": 0, "gid": 0},
            "args": args,
            "env": ["PATH=/bin", "HOME=/"],
            "cwd": "/",
            "noNewPrivileges": true,
        },
        "root": {"path": "rootfs"},
        "hostname": "streams",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
            {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
             "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
        ],
        "linux": {
            "cgroupsPath": cgroup,
            "namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "uts"},
                           {"type": "mount"}, {"type": "network"}],
        },
    })
}

/// The managers berthd builds, over temporary directories.
struct Runtime {
    tmp: tempfile::TempDir,
    containers: Arc<ContainerManager>,
    sandboxes: Arc<SandboxManager>,
    streams: ContainerStreams,
    made: Vec<ContainerRecord>,
}

impl Runtime {
    fn new() -> Self {
        let tmp = tempfile::Builder::new()
            .prefix("berth-srt-")
            .tempdir()
            .expect("tempdir");
        let cgroups: Arc<dyn berth_cgroups::CgroupManager> =
            Arc::new(berth_cgroups::fake::FakeManager::new());
        let sandboxes = Arc::new(SandboxManager {
            store: SandboxStore::open(&tmp.path().join("sandboxes")).expect("sandbox store"),
            cgroups: cgroups.clone(),
            parents: berth_cgroups::ParentTracker::open(cgroups, tmp.path().join("parents.json"))
                .expect("tracker"),
            driver: berth_cgroups::Driver::Cgroupfs,
            default_parent: "/berth".into(),
            network: Arc::new(berth_network::cni::CniConfig::new(
                tmp.path().join("cni"),
                vec![],
            )),
            namespaces: Arc::new(berthd::sandbox::host::Pinns {
                binary: berthd::helper_binary::HelperBinary::unprotected("/nonexistent"),
            }),
            ns_dir: tmp.path().join("ns"),
            pods_dir: tmp.path().join("pods"),
            cgroup_lock: std::sync::Mutex::new(()),
            runtime_handlers: Arc::new(berthd::runtime_handlers::RuntimeHandlers::default_only(
                tmp.path().join("runtime"),
                &berthd::kernel_features::KernelFeatures {
                    recursive_read_only: false,
                    user_namespaces: false,
                },
            )),
            user_namespaces: false,
            lsm: berth_spec::LsmHost::default(),
            pod_cidr: std::sync::RwLock::new(None),
            unfinished: Default::default(),
        });
        let containers = Arc::new(ContainerManager {
            store: ContainerStore::open(&tmp.path().join("containers")).expect("store"),
            images: Arc::new(
                berth_image::store::ImageStore::open(&tmp.path().join("images"))
                    .expect("image store"),
            ),
            sandboxes: sandboxes.clone(),
            layers_dir: tmp.path().join("layers"),
            shims_dir: tmp.path().join("shims"),
            // The view berthd runs shims through.
            shim: berthd::helper_binary::HelperBinary::protect(
                &berthd::helper_binary::HostViews,
                &shim_binary(),
            )
            .expect("a protected view of berth-shim"),
            shims: Arc::new(berthd::container::host::ShimProcesses::new()),
            mounts: Arc::new(berthd::container::host::OverlayMounts),
            cgroups: Arc::new(berth_cgroups::CgroupfsManager::new().expect("cgroups")),
            layer_leases: Default::default(),
            cdi_spec_dirs: Vec::new(),
            criu: Arc::new(berthd::container::host::CriuBinary),
            criu_check: Default::default(),
            allow_checkpoint_images: false,
            default_rlimits: Vec::new(),
            features: berth_spec::CgroupFeatures::default(),
            trim_mounts: None,
            states: berthd::container::state_cache::StateCache::new(64),
        });
        let streams = ContainerStreams::new(containers.clone(), sandboxes.clone());
        Self {
            tmp,
            containers,
            sandboxes,
            streams,
            made: Vec::new(),
        }
    }

    /// A created (not started) container, with its record in the store.
    async fn create(&mut self, args: &[&str], tty: bool, stdin: bool, stdin_once: bool) -> String {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let id = format!("srt{}x{n}", std::process::id());
        let dir = self.tmp.path().join(&id);
        let bundle = dir.join("bundle");
        make_rootfs(&bundle.join("rootfs"));
        // A cgroup of its own at the top, no shared parent: a test ending
        // would remove a shared parent while another creates under it.
        let cgroup = format!("/{id}");
        fs::write(
            bundle.join("config.json"),
            serde_json::to_vec(&config_json(args, tty, &cgroup)).expect("json"),
        )
        .expect("config.json");
        let shim_dir = self.tmp.path().join("shims").join(&id);
        fs::create_dir_all(&shim_dir).expect("shim dir");
        let log = dir.join("c.log");
        let pid = shim::launch(&ShimLaunch {
            binary: &self.containers.shim,
            id: &id,
            bundle: &bundle,
            state_root: &self.tmp.path().join("runtime"),
            runtime_binary: None,
            dir: &shim_dir,
            log: Some(&log),
            tty,
            stdin,
            stdin_once,
            kept_log: &dir.join("failed.shim.log"),
            timeout: shim::CREATE_TIMEOUT,
            restore: None,
            cgroup_dirs: &[],
            trim_mounts: None,
        })
        .await
        .expect("shim created the container");
        let config = ContainerConfig {
            tty,
            stdin,
            stdin_once,
            ..Default::default()
        };
        let record = ContainerRecord {
            format: 1,
            id: id.clone(),
            name_key: id.clone(),
            sandbox_id: String::new(),
            created_at: 0,
            config: config.clone(),
            image_id: String::new(),
            image_ref: String::new(),
            layers: vec![],
            log_path: Some(log),
            bundle,
            layer_dir: dir.join("layer"),
            shim_dir,
            cgroup_path: cgroup.clone(),
            cgroups_path: cgroup,
            pid,
            stop_signal: 15,
            restore_from: None,
            runtime_handler: String::new(),
            start: berthd::container::store::StartMark::Started(String::new()),
        };
        self.containers.store.insert(record.clone());
        self.made.push(record);
        id
    }

    async fn run(&mut self, args: &[&str], tty: bool, stdin: bool, stdin_once: bool) -> String {
        let id = self.create(args, tty, stdin, stdin_once).await;
        self.containers.start(&id).await.expect("start");
        id
    }

    fn record(&self, id: &str) -> &ContainerRecord {
        self.made.iter().find(|r| r.id == id).expect("made here")
    }

    async fn status(&self, id: &str) -> RunState {
        shim::state(&self.record(id).shim_dir)
            .await
            .expect("state")
            .status
    }

    fn log(&self, id: &str) -> String {
        fs::read_to_string(self.record(id).log_path.as_ref().expect("log")).unwrap_or_default()
    }

    /// Host pids in the container's cgroup whose command line is `cmdline`.
    fn pids_running(&self, id: &str, cmdline: &str) -> Vec<i32> {
        let rel = self
            .record(id)
            .cgroups_path
            .trim_start_matches('/')
            .to_string();
        let procs = fs::read_to_string(format!("/sys/fs/cgroup/pids/{rel}/cgroup.procs"))
            .or_else(|_| fs::read_to_string(format!("/sys/fs/cgroup/memory/{rel}/cgroup.procs")))
            .unwrap_or_default();
        procs
            .lines()
            .filter_map(|p| p.trim().parse::<i32>().ok())
            .filter(|pid| {
                fs::read(format!("/proc/{pid}/cmdline"))
                    .map(|c| String::from_utf8_lossy(&c).replace('\0', " ").trim() == cmdline)
                    .unwrap_or(false)
            })
            .collect()
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        for r in &self.made {
            let socket = r.shim_dir.join("shim.sock");
            let _ = berth_shim_api::client::call(
                &socket,
                &Request::Kill {
                    signal: SignalArg::Number(9),
                    all: true,
                },
                Some(T),
            );
            let _ = berth_shim_api::client::call(&socket, &Request::Shutdown, Some(T));
        }
        // what a failed shutdown left, in every v1 hierarchy
        if let Ok(hierarchies) = fs::read_dir("/sys/fs/cgroup") {
            for h in hierarchies.flatten() {
                for r in &self.made {
                    let _ = fs::remove_dir(h.path().join(&r.id));
                }
            }
        }
    }
}

/// One side of a client stream pair: what the runtime gets, and ours.
fn pipe() -> (DuplexStream, DuplexStream) {
    tokio::io::duplex(64 * 1024)
}

async fn read_until(r: &mut (impl AsyncRead + Unpin), want: &str) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + T;
    while !String::from_utf8_lossy(&got).contains(want) {
        let left = deadline.saturating_duration_since(Instant::now());
        let n = tokio::time::timeout(left, r.read(&mut buf))
            .await
            .unwrap_or_else(|_| {
                panic!("{want:?} not seen; got {:?}", String::from_utf8_lossy(&got))
            })
            .expect("read");
        assert!(
            n > 0,
            "stream ended before {want:?}: {:?}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got).to_string()
}

async fn read_to_end(mut r: DuplexStream) -> String {
    let mut got = Vec::new();
    tokio::time::timeout(T, r.read_to_end(&mut got))
        .await
        .expect("stream ended")
        .expect("read");
    String::from_utf8_lossy(&got).to_string()
}

async fn wait_for(mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + T;
    while !cond() {
        assert!(Instant::now() < deadline, "condition not met within {T:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn exec_spec(id: &str, cmd: &[&str], tty: bool) -> ExecSpec {
    ExecSpec {
        container_id: id.to_string(),
        cmd: cmd.iter().map(|s| s.to_string()).collect(),
        tty,
        stdin: true,
        stdout: true,
        stderr: !tty,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_with_pipes_stdin_eof_and_exit_code() {
    let mut rt = Runtime::new();
    let id = rt.run(&["sleep", "1000"], false, false, false).await;
    let (mut stdin, stdin_theirs) = pipe();
    let (stdout_theirs, stdout) = pipe();
    let (stderr_theirs, stderr) = pipe();
    let streams = SessionStreams {
        stdin: Some(Box::new(stdin_theirs)),
        stdout: Some(Box::new(stdout_theirs)),
        stderr: Some(Box::new(stderr_theirs)),
        resize: None,
    };
    stdin.write_all(b"hello\n").await.expect("stdin");
    drop(stdin);
    let spec = exec_spec(&id, &["sh", "-c", "cat; echo oops >&2; exit 3"], false);
    let code = tokio::time::timeout(T, rt.streams.exec(spec, streams))
        .await
        .expect("exec finished")
        .expect("exec ran");
    assert_eq!(code, 3);
    assert_eq!(read_to_end(stdout).await, "hello\n");
    assert_eq!(read_to_end(stderr).await, "oops\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_with_a_tty_and_a_resize() {
    let mut rt = Runtime::new();
    let id = rt.run(&["sleep", "1000"], false, false, false).await;
    let (mut stdin, stdin_theirs) = pipe();
    let (stdout_theirs, stdout) = pipe();
    let (tx, rx) = mpsc::channel(4);
    tx.send(TerminalSize {
        width: 100,
        height: 40,
    })
    .await
    .expect("resize");
    stdin.write_all(b"go\n").await.expect("stdin");
    let streams = SessionStreams {
        stdin: Some(Box::new(stdin_theirs)),
        stdout: Some(Box::new(stdout_theirs)),
        stderr: None,
        resize: Some(rx),
    };
    let spec = exec_spec(
        &id,
        &["sh", "-c", "read x; stty size; echo got:$x; exit 4"],
        true,
    );
    let code = tokio::time::timeout(T, rt.streams.exec(spec, streams))
        .await
        .expect("exec finished")
        .expect("exec ran");
    assert_eq!(code, 4);
    let text = read_to_end(stdout).await;
    assert!(text.contains("40 100"), "{text:?}");
    assert!(text.contains("got:go"), "{text:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_an_exec_kills_its_process() {
    let mut rt = Runtime::new();
    let id = rt.run(&["sleep", "1000"], false, false, false).await;
    for tty in [false, true] {
        let (_stdin, stdin_theirs) = pipe();
        let (stdout_theirs, _stdout) = pipe();
        let streams = SessionStreams {
            stdin: Some(Box::new(stdin_theirs)),
            stdout: Some(Box::new(stdout_theirs)),
            stderr: None,
            resize: None,
        };
        let mut spec = exec_spec(&id, &["sleep", "777"], tty);
        spec.stderr = false;
        let mut exec = Box::pin(rt.streams.exec(spec, streams));
        let mut pids = Vec::new();
        tokio::select! {
            r = &mut exec => panic!("exec ended early: {r:?}"),
            () = wait_for(|| { pids = rt.pids_running(&id, "sleep 777"); !pids.is_empty() }) => {}
        }
        drop(exec);
        wait_for(|| rt.pids_running(&id, "sleep 777").is_empty()).await;
        // A killed task leaves its cgroup in do_exit, a moment before it is
        // a zombie (or reaped): wait for that too, rather than race it.
        for pid in pids {
            wait_for(|| !is_alive(pid)).await;
        }
    }
    assert_eq!(rt.status(&id).await, RunState::Running);
}

fn is_alive(pid: i32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit_once(") ")
                .is_some_and(|(_, r)| !r.starts_with('Z'))
        })
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_errors_name_the_container() {
    let mut rt = Runtime::new();
    let streams = || SessionStreams {
        stdin: None,
        stdout: None,
        stderr: None,
        resize: None,
    };
    match rt
        .streams
        .exec(exec_spec("nope", &["true"], false), streams())
        .await
    {
        Err(SessionError::ContainerNotFound(id)) => assert_eq!(id, "nope"),
        other => panic!("{other:?}"),
    }
    let id = rt.create(&["sleep", "1000"], false, false, false).await;
    match rt
        .streams
        .exec(exec_spec(&id, &["true"], false), streams())
        .await
    {
        Err(SessionError::NotRunning(got)) => assert_eq!(got, id),
        other => panic!("{other:?}"),
    }
}

fn attach_spec(id: &str, stdin: bool) -> AttachSpec {
    AttachSpec {
        container_id: id.to_string(),
        tty: false,
        stdin,
        stdout: true,
        stderr: true,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_attachers_and_detach_keeps_the_container() {
    let mut rt = Runtime::new();
    let id = rt
        .run(
            &[
                "sh",
                "-c",
                "while read l; do echo out:$l; echo err:$l >&2; done",
            ],
            false,
            true,
            false,
        )
        .await;
    let (mut a_in, a_in_theirs) = pipe();
    let (a_out_theirs, mut a_out) = pipe();
    let (a_err_theirs, mut a_err) = pipe();
    let (b_out_theirs, mut b_out) = pipe();
    let (b_err_theirs, mut b_err) = pipe();
    let a = rt.streams.attach(
        attach_spec(&id, true),
        SessionStreams {
            stdin: Some(Box::new(a_in_theirs)),
            stdout: Some(Box::new(a_out_theirs)),
            stderr: Some(Box::new(a_err_theirs)),
            resize: None,
        },
    );
    let b = rt.streams.attach(
        attach_spec(&id, false),
        SessionStreams {
            stdin: None,
            stdout: Some(Box::new(b_out_theirs)),
            stderr: Some(Box::new(b_err_theirs)),
            resize: None,
        },
    );
    let mut a = Box::pin(a);
    let mut b = Box::pin(b);
    let check = async {
        // b may connect a little later than a: repeat lines until b has
        // seen one (each attacher sees every line after it joined)
        let mut n = 0;
        loop {
            a_in.write_all(format!("l{n}\n").as_bytes())
                .await
                .expect("stdin");
            read_until(&mut a_out, &format!("out:l{n}\n")).await;
            read_until(&mut a_err, &format!("err:l{n}\n")).await;
            let seen_b = tokio::time::timeout(
                Duration::from_millis(500),
                read_until(&mut b_out, &format!("out:l{n}\n")),
            )
            .await;
            if seen_b.is_ok() {
                read_until(&mut b_err, &format!("err:l{n}\n")).await;
                return;
            }
            n += 1;
            assert!(n < 40, "the second attacher never saw output");
        }
    };
    tokio::select! {
        r = &mut a => panic!("attach a ended early: {r:?}"),
        r = &mut b => panic!("attach b ended early: {r:?}"),
        () = check => {}
    }
    // the end of a's stdin ends its session (no stdin_once: a detaches)
    drop(a_in);
    tokio::time::timeout(T, &mut a)
        .await
        .expect("a detaches when its stdin ends")
        .expect("attach ok");
    assert_eq!(rt.status(&id).await, RunState::Running);
    // a third attacher, dropped in mid-session, only detaches
    let (mut c_in, c_in_theirs) = pipe();
    let (c_out_theirs, _c_out) = pipe();
    let mut c = Box::pin(rt.streams.attach(
        attach_spec(&id, true),
        SessionStreams {
            stdin: Some(Box::new(c_in_theirs)),
            stdout: Some(Box::new(c_out_theirs)),
            stderr: None,
            resize: None,
        },
    ));
    let typed = async {
        // until b, still attached, shows that c's input arrived
        for n in 100.. {
            c_in.write_all(format!("l{n}\n").as_bytes())
                .await
                .expect("stdin");
            let seen = tokio::time::timeout(
                Duration::from_millis(500),
                read_until(&mut b_out, &format!("out:l{n}\n")),
            )
            .await;
            if seen.is_ok() {
                return;
            }
            assert!(n < 140, "c's input never reached the container");
        }
    };
    tokio::select! {
        r = &mut c => panic!("attach c ended early: {r:?}"),
        r = &mut b => panic!("attach b ended early: {r:?}"),
        () = typed => {}
    }
    drop(c);
    drop(a);
    assert_eq!(rt.status(&id).await, RunState::Running);
    let (stopped, b_done) =
        tokio::join!(rt.containers.stop(&id, 0), tokio::time::timeout(T, &mut b));
    stopped.expect("stop");
    b_done
        .expect("b ends when the container exits")
        .expect("attach ok");
    assert!(rt.log(&id).contains("stdout F out:l0"), "{}", rt.log(&id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_once_attach_ends_with_its_stdin() {
    let mut rt = Runtime::new();
    let id = rt
        .run(&["sh", "-c", "cat; echo done"], false, true, true)
        .await;
    let (mut stdin, stdin_theirs) = pipe();
    let (stdout_theirs, stdout) = pipe();
    stdin.write_all(b"x\n").await.expect("stdin");
    drop(stdin);
    let r = tokio::time::timeout(
        T,
        rt.streams.attach(
            attach_spec(&id, true),
            SessionStreams {
                stdin: Some(Box::new(stdin_theirs)),
                stdout: Some(Box::new(stdout_theirs)),
                stderr: None,
                resize: None,
            },
        ),
    )
    .await
    .expect("attach ended when the container, its stdin closed, exited");
    r.expect("attach ok");
    // the client saw the output that followed the end of its stdin
    assert_eq!(read_to_end(stdout).await, "x\ndone\n");
    assert_eq!(rt.status(&id).await, RunState::Stopped);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn port_forward_dials_inside_the_pods_netns() {
    let rt = Runtime::new();
    // a "pod" network namespace: a thread's own, with lo up and a server
    let (ns_tx, ns_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let server = std::thread::spawn(move || {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).expect("unshare net");
        let up = Command::new("ip")
            .args(["link", "set", "lo", "up"])
            .status()
            .expect("ip");
        assert!(up.success());
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind in netns");
        let port = listener.local_addr().expect("addr").port();
        let tid = nix::unistd::gettid();
        ns_tx
            .send((
                format!("/proc/{}/task/{tid}/ns/net", std::process::id()),
                port,
            ))
            .expect("send");
        let (mut conn, _) = listener.accept().expect("accept");
        std::io::Write::write_all(&mut conn, b"from the pod").expect("reply");
        drop(conn);
        let _ = stop_rx.recv();
    });
    let (netns, port) = ns_rx.recv().expect("netns");
    let pod = |id: &str, namespaces: HashMap<String, PathBuf>, mode: NamespaceMode| SandboxRecord {
        format: 1,
        id: id.into(),
        name_key: id.into(),
        created_at: 0,
        state: SandboxState::Ready,
        runtime_handler: String::new(),
        config: PodSandboxConfig {
            linux: Some(LinuxPodSandboxConfig {
                security_context: Some(LinuxSandboxSecurityContext {
                    namespace_options: Some(NamespaceOption {
                        network: mode as i32,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        },
        dir: PathBuf::new(),
        files_dir: None,
        namespaces,
        infra: None,
        cgroup_parent: String::new(),
        cgroup_path: String::new(),
        ips: vec![],
        network_config: None,
        cni_result: None,
        network_attached: false,
        shm: None,
    };
    rt.sandboxes.store.insert(pod(
        "podnet",
        HashMap::from([("net".to_string(), PathBuf::from(&netns))]),
        NamespaceMode::Pod,
    ));
    let mut conn = rt
        .streams
        .port_forward("podnet", port)
        .await
        .expect("dial in the pod");
    let mut got = String::new();
    tokio::time::timeout(T, conn.read_to_string(&mut got))
        .await
        .expect("reply")
        .expect("read");
    assert_eq!(got, "from the pod");
    let _ = stop_tx.send(());
    server.join().expect("server thread");

    // host network: the host's loopback
    let host = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let host_port = host.local_addr().expect("addr").port();
    rt.sandboxes
        .store
        .insert(pod("podhost", HashMap::new(), NamespaceMode::Node));
    let (dialed, accepted) =
        tokio::join!(rt.streams.port_forward("podhost", host_port), host.accept());
    assert_eq!(
        dialed
            .expect("dial on the host")
            .local_addr()
            .expect("local"),
        accepted.expect("accept").1
    );

    match rt.streams.port_forward("nopod", 80).await {
        Err(SessionError::SandboxNotFound(id)) => assert_eq!(id, "nopod"),
        other => panic!("{other:?}"),
    }
    // a pod's own network without a pinned namespace is an error, not the host's
    rt.sandboxes
        .store
        .insert(pod("podlost", HashMap::new(), NamespaceMode::Pod));
    assert!(matches!(
        rt.streams.port_forward("podlost", host_port).await,
        Err(SessionError::Failed(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_with_stdin_to_a_container_without_stdin_still_streams() {
    let mut rt = Runtime::new();
    let id = rt
        .run(
            &["sh", "-c", "while true; do echo tick; sleep 0.2; done"],
            false,
            false,
            false,
        )
        .await;
    let (mut stdin, stdin_theirs) = pipe();
    let (stdout_theirs, mut stdout) = pipe();
    let attach = rt.streams.attach(
        attach_spec(&id, true),
        SessionStreams {
            stdin: Some(Box::new(stdin_theirs)),
            stdout: Some(Box::new(stdout_theirs)),
            stderr: None,
            resize: None,
        },
    );
    let mut attach = Box::pin(attach);
    tokio::select! {
        r = &mut attach => panic!("attach ended early: {r:?}"),
        _ = async {
            stdin.write_all(b"ignored\n").await.expect("stdin");
            read_until(&mut stdout, "tick\n").await;
            // once output flows the session is surely running: the
            // client's stdin is still taken (and dropped), not closed
            stdin.write_all(b"still ignored\n").await.expect("stdin after output");
            read_until(&mut stdout, "tick\n").await
        } => {}
    }
    let (stopped, done) = tokio::join!(
        rt.containers.stop(&id, 0),
        tokio::time::timeout(T, &mut attach)
    );
    stopped.expect("stop");
    done.expect("attach ends with the container")
        .expect("attach ok");
}
