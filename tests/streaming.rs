//! Exec against a real berthd and a real container, through the real
//! streaming server: a non-zero exit code, stdin end of file, and a client
//! that goes away mid-stream (its process must not outlive it).
//!
//! The harness is the one of tests/containers.rs: its own berthd, registry,
//! CNI bridge and cgroup parents, removed by a guard.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use berth_stream::spdy::{Headers, Role, Session, SessionConfig, Stream};
use berth_tests::host::{cgroup_hierarchies, cgroup_subtree, log_tail, mounts_under, read_procs};
use berth_tests::registry::{Layer, RawTar, TestImage, TestRegistry};
use berth_tests::Berthd;
use cri_api::v1::runtime_service_client::RuntimeServiceClient;
use cri_api::v1::{
    ContainerConfig, ContainerMetadata, ContainerState, ContainerStatus, ContainerStatusRequest,
    CreateContainerRequest, ExecRequest, ExecSyncRequest, ImageSpec, KeyValue,
    LinuxPodSandboxConfig, LinuxSandboxSecurityContext, NamespaceMode, NamespaceOption,
    PodSandboxConfig, PodSandboxMetadata, PullImageRequest, RemovePodSandboxRequest,
    RunPodSandboxRequest, StartContainerRequest, StopPodSandboxRequest,
};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tonic::transport::Channel;

/// How long anything that settles asynchronously may take.
const SETTLE: Duration = Duration::from_secs(20);

fn pid() -> u32 {
    std::process::id()
}

/// Pids of processes whose command line mentions `needle` (the shims
/// berthd started for this test name the test's temp dir).
fn pids_mentioning(needle: &str) -> Vec<i32> {
    let mut pids = Vec::new();
    let own = std::process::id() as i32;
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if pid == own {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains("berth-shim") && cmdline.contains(needle) {
            pids.push(pid);
        }
    }
    pids
}

/// A layer with the host's dynamic busybox, the libraries it loads, applet
/// links and an /etc/passwd with root.
fn busybox_layer_tar() -> Vec<u8> {
    let busybox =
        std::fs::read("/usr/bin/busybox").expect("/usr/bin/busybox (apt-get install busybox)");
    let ldd = Command::new("ldd")
        .arg("/usr/bin/busybox")
        .output()
        .expect("ldd");
    let ldd = String::from_utf8_lossy(&ldd.stdout).into_owned();
    // Library paths as the loader looks them up: `name => /path (addr)`
    // or `/path (addr)`.
    let mut libs: Vec<String> = Vec::new();
    for line in ldd.lines() {
        let path = match line.split_once("=>") {
            Some((_, right)) => right.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        if let Some(path) = path.filter(|path| path.starts_with('/')) {
            libs.push(path.to_string());
        }
    }
    assert!(
        libs.iter().any(|lib| lib.contains("libc.so")),
        "ldd named no libc: {ldd}"
    );
    let mut tar = RawTar::new()
        .dir("bin/", 0o755)
        .dir("etc/", 0o755)
        .dir("lib/", 0o755)
        .dir("lib/x86_64-linux-gnu/", 0o755)
        .dir("lib64/", 0o755)
        .dir("proc/", 0o555)
        .dir("sys/", 0o555)
        .dir("dev/", 0o755)
        .dir("tmp/", 0o1777)
        .file("bin/busybox", &busybox, 0o755);
    for lib in &libs {
        let data = std::fs::read(lib).unwrap_or_else(|err| panic!("{lib}: {err}"));
        tar = tar.file(lib.trim_start_matches('/'), &data, 0o755);
    }
    for applet in ["sh", "sleep", "ps", "echo", "cat", "true"] {
        tar = tar.symlink(&format!("bin/{applet}"), "busybox");
    }
    tar.file("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n", 0o644)
        .file("etc/group", b"root:x:0:\n", 0o644)
        .finish()
}

fn pod_config(
    name: &str,
    parent: &str,
    log_dir: &Path,
    pid_mode: NamespaceMode,
) -> PodSandboxConfig {
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: name.to_string(),
            uid: format!("uid-{name}"),
            namespace: "berth-ct".to_string(),
            attempt: 0,
        }),
        hostname: name.to_string(),
        log_directory: log_dir.display().to_string(),
        linux: Some(LinuxPodSandboxConfig {
            cgroup_parent: parent.to_string(),
            security_context: Some(LinuxSandboxSecurityContext {
                namespace_options: Some(NamespaceOption {
                    pid: pid_mode as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn container_config(name: &str, image: &str, command: &[&str]) -> ContainerConfig {
    ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: name.to_string(),
            attempt: 0,
        }),
        image: Some(ImageSpec {
            image: image.to_string(),
            ..Default::default()
        }),
        command: command.iter().map(|part| part.to_string()).collect(),
        envs: vec![KeyValue {
            key: "PATH".to_string(),
            value: "/bin".to_string(),
        }],
        log_path: format!("{name}.log"),
        ..Default::default()
    }
}

struct Harness {
    bridge: String,
    cgroup_root: String,
    registry: TestRegistry,
    image: String,
    berthd: Berthd,
}

impl Harness {
    /// Starts berthd (cgroupfs), a registry with the busybox image, writes
    /// the CNI network and pulls the image through CRI.
    async fn start(n: u32) -> Self {
        let cgroup_root = format!("/berth-ct-{}-{n}", pid());
        let config = format!(
            "cgroup_driver = \"cgroupfs\"\ndefault_cgroup_parent = \"{cgroup_root}/default\"\n"
        );
        let berthd = Berthd::start(&config);
        let registry = TestRegistry::start();
        let harness = Self {
            bridge: format!("bc{}x{n}", pid() % 1000),
            cgroup_root,
            image: registry.reference("test/busybox:1"),
            registry,
            berthd,
        };
        assert!(harness.bridge.len() <= 15);
        harness.write_network(n);
        let image = TestImage::new(vec![Layer::gzip(busybox_layer_tar())]);
        harness
            .registry
            .push_image("test/busybox", &["1"], &image)
            .await;
        harness
            .berthd
            .image_client()
            .await
            .pull_image(PullImageRequest {
                image: Some(ImageSpec {
                    image: harness.image.clone(),
                    ..Default::default()
                }),
                auth: None,
                sandbox_config: None,
            })
            .await
            .unwrap_or_else(|status| panic!("PullImage {}: {status:?}", harness.image));
        harness
    }

    fn write_network(&self, n: u32) {
        let conflist = json!({
            "cniVersion": "1.0.0",
            "name": format!("berth-ct-{n}"),
            "plugins": [{
                "type": "bridge",
                "bridge": self.bridge,
                "isGateway": true,
                "ipMasq": false,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": format!("10.{}.{n}.0/24", 150 + pid() % 50)}]],
                    "dataDir": self.berthd.sandbox.dir.path().join("ipam"),
                },
            }],
        });
        let dir = self.berthd.sandbox.cni_conf_dir();
        std::fs::create_dir_all(&dir).expect("CNI conf dir");
        std::fs::write(
            dir.join("10-berth-ct.conflist"),
            serde_json::to_vec_pretty(&conflist).unwrap(),
        )
        .expect("conflist");
    }

    fn parent(&self, name: &str) -> String {
        format!("{}/{name}", self.cgroup_root)
    }

    fn log_dir(&self, pod: &str) -> PathBuf {
        self.berthd.sandbox.dir.path().join("logs").join(pod)
    }

    async fn client(&self) -> RuntimeServiceClient<Channel> {
        self.berthd.runtime_client().await
    }

    async fn run_pod(&self, name: &str, pid_mode: NamespaceMode) -> (String, PodSandboxConfig) {
        let config = pod_config(name, &self.parent(name), &self.log_dir(name), pid_mode);
        let id = self
            .client()
            .await
            .run_pod_sandbox(RunPodSandboxRequest {
                config: Some(config.clone()),
                runtime_handler: String::new(),
            })
            .await
            .unwrap_or_else(|status| {
                panic!(
                    "RunPodSandbox {name}: {status:?}\nberthd log:\n{}",
                    log_tail(&self.berthd)
                )
            })
            .into_inner()
            .pod_sandbox_id;
        (id, config)
    }

    async fn create(
        &self,
        pod: &str,
        pod_config: &PodSandboxConfig,
        config: ContainerConfig,
    ) -> Result<String, tonic::Status> {
        self.client()
            .await
            .create_container(CreateContainerRequest {
                pod_sandbox_id: pod.to_string(),
                config: Some(config),
                sandbox_config: Some(pod_config.clone()),
            })
            .await
            .map(|response| response.into_inner().container_id)
    }

    async fn create_ok(
        &self,
        pod: &str,
        pod_config: &PodSandboxConfig,
        config: ContainerConfig,
    ) -> String {
        let name = config.metadata.clone().unwrap_or_default().name;
        self.create(pod, pod_config, config)
            .await
            .unwrap_or_else(|status| {
                panic!(
                    "CreateContainer {name}: {status:?}\nberthd log:\n{}",
                    log_tail(&self.berthd)
                )
            })
    }

    async fn start_container(&self, id: &str) {
        self.client()
            .await
            .start_container(StartContainerRequest {
                container_id: id.to_string(),
            })
            .await
            .unwrap_or_else(|status| {
                panic!(
                    "StartContainer {id}: {status:?}\nberthd log:\n{}",
                    log_tail(&self.berthd)
                )
            });
    }

    async fn status(&self, id: &str) -> ContainerStatus {
        self.client()
            .await
            .container_status(ContainerStatusRequest {
                container_id: id.to_string(),
                verbose: false,
            })
            .await
            .unwrap_or_else(|status| panic!("ContainerStatus {id}: {status:?}"))
            .into_inner()
            .status
            .expect("status")
    }

    async fn wait_state(&self, id: &str, wanted: ContainerState) -> ContainerStatus {
        let deadline = Instant::now() + SETTLE;
        loop {
            let status = self.status(id).await;
            if status.state == wanted as i32 {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "container {id} not {wanted:?} within {SETTLE:?}: {status:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Stops and removes a pod (its containers go with it).
    async fn remove_pod(&self, id: &str) {
        let mut client = self.client().await;
        client
            .stop_pod_sandbox(StopPodSandboxRequest {
                pod_sandbox_id: id.to_string(),
            })
            .await
            .unwrap_or_else(|status| panic!("StopPodSandbox {id}: {status:?}"));
        client
            .remove_pod_sandbox(RemovePodSandboxRequest {
                pod_sandbox_id: id.to_string(),
            })
            .await
            .unwrap_or_else(|status| panic!("RemovePodSandbox {id}: {status:?}"));
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        let dir = self.berthd.sandbox.dir.path().to_path_buf();
        if std::thread::panicking() {
            eprintln!("berthd log (last lines):\n{}", log_tail(&self.berthd));
            self.berthd.remove_all_pods_blocking();
            // Shims berthd started for this test (they outlive berthd).
            for pid in pids_mentioning(&dir.display().to_string()) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        // Whatever is left in this test's own cgroups was started for it.
        for hierarchy in cgroup_hierarchies() {
            let root = hierarchy.join(self.cgroup_root.trim_start_matches('/'));
            for cgroup in cgroup_subtree(&root) {
                for pid in read_procs(&cgroup) {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
            }
        }
        for hierarchy in cgroup_hierarchies() {
            let root = hierarchy.join(self.cgroup_root.trim_start_matches('/'));
            for cgroup in cgroup_subtree(&root) {
                for _ in 0..50 {
                    if std::fs::remove_dir(&cgroup).is_ok() || !cgroup.exists() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
        let mut mounts = mounts_under(&dir);
        mounts.sort_by_key(|mount| std::cmp::Reverse(mount.components().count()));
        for mount in mounts {
            let _ = nix::mount::umount2(&mount, nix::mount::MntFlags::MNT_DETACH);
        }
        let _ = Command::new("ip")
            .args(["link", "del", &self.bridge])
            .stderr(std::process::Stdio::null())
            .status();
    }
}

// ---------------------------------------------------------------------------
// A remotecommand client (v4 over SPDY), from berth-stream's own session
// ---------------------------------------------------------------------------

/// Opens the URL an Exec call returned: the HTTP upgrade, then SPDY.
async fn connect_exec(url: &str) -> Session {
    let rest = url.strip_prefix("http://").expect("http:// URL");
    let (host, path) = rest.split_once('/').expect("URL path");
    let mut tcp = TcpStream::connect(host).await.expect("streaming server");
    let request = format!(
        "GET /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\
         X-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n"
    );
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8];
        assert_eq!(
            tcp.read(&mut byte).await.unwrap(),
            1,
            "response head cut short"
        );
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    Session::start(tcp, Role::Client, SessionConfig::default()).0
}

fn open(session: &Session, stream_type: &str) -> Stream {
    session
        .open_stream(Headers::new().with("streamType", stream_type))
        .unwrap()
}

async fn read_all(stream: &mut Stream) -> String {
    let mut out = Vec::new();
    stream.reader.read_to_end(&mut out).await.unwrap();
    String::from_utf8(out).unwrap()
}

impl Harness {
    /// A running busybox container in a fresh pod.
    async fn running_container(&self, name: &str) -> (String, String) {
        let (pod, pod_config) = self.run_pod(name, NamespaceMode::Pod).await;
        let config = container_config("main", &self.image, &["sleep", "3600"]);
        let id = self.create_ok(&pod, &pod_config, config).await;
        self.start_container(&id).await;
        self.wait_state(&id, ContainerState::ContainerRunning).await;
        (pod, id)
    }

    async fn exec_url(&self, id: &str, cmd: &[&str], stdin: bool) -> String {
        self.client()
            .await
            .exec(ExecRequest {
                container_id: id.to_string(),
                cmd: cmd.iter().map(|s| s.to_string()).collect(),
                tty: false,
                stdin,
                stdout: true,
                stderr: true,
            })
            .await
            .unwrap_or_else(|status| panic!("Exec {cmd:?}: {status:?}"))
            .into_inner()
            .url
    }

    async fn ps(&self, id: &str) -> String {
        let out = self
            .client()
            .await
            .exec_sync(ExecSyncRequest {
                container_id: id.to_string(),
                cmd: vec!["ps".into()],
                timeout: 10,
            })
            .await
            .unwrap_or_else(|status| panic!("ExecSync ps: {status:?}"))
            .into_inner();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn exec_reports_exit_codes_and_sees_stdin_end() {
    let h = Harness::start(1).await;
    let (pod, id) = h.running_container("exec-codes").await;

    // A non-zero exit code comes back in the v4 status.
    let session = connect_exec(
        &h.exec_url(&id, &["sh", "-c", "echo out; echo err >&2; exit 3"], false)
            .await,
    )
    .await;
    let mut error = open(&session, "error");
    let mut stdout = open(&session, "stdout");
    let mut stderr = open(&session, "stderr");
    let (out, err) = (read_all(&mut stdout).await, read_all(&mut stderr).await);
    let status = read_all(&mut error).await;
    assert_eq!(
        (out.as_str(), err.as_str()),
        ("out\n", "err\n"),
        "status: {status}"
    );
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert_eq!(status["status"], "Failure", "{status}");
    assert_eq!(status["reason"], "NonZeroExitCode", "{status}");
    assert_eq!(status["details"]["causes"][0]["message"], "3", "{status}");

    // cat only exits once its stdin reaches end of file.
    let session = connect_exec(&h.exec_url(&id, &["cat"], true).await).await;
    let mut error = open(&session, "error");
    let mut stdin = open(&session, "stdin");
    let mut stdout = open(&session, "stdout");
    let _stderr = open(&session, "stderr");
    stdin
        .writer
        .write_all(b"through the container\n")
        .await
        .unwrap();
    stdin.writer.shutdown().await.unwrap();
    assert_eq!(read_all(&mut stdout).await, "through the container\n");
    assert_eq!(
        read_all(&mut error).await,
        r#"{"metadata":{},"status":"Success"}"#
    );

    h.remove_pod(&pod).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_goes_away_leaves_no_process_behind() {
    let h = Harness::start(2).await;
    let (pod, id) = h.running_container("exec-gone").await;

    let url = h
        .exec_url(&id, &["sh", "-c", "echo started; exec sleep 4242"], true)
        .await;
    let session = connect_exec(&url).await;
    let _error = open(&session, "error");
    let _stdin = open(&session, "stdin");
    let mut stdout = open(&session, "stdout");
    let _stderr = open(&session, "stderr");
    let mut started = [0u8; 8];
    stdout.reader.read_exact(&mut started).await.unwrap();
    assert_eq!(&started, b"started\n");
    assert!(h.ps(&id).await.contains("sleep 4242"));

    // The client vanishes mid-stream: its connection closes.
    session.shutdown(Duration::ZERO).await;
    drop(session);

    let deadline = Instant::now() + SETTLE;
    loop {
        let ps = h.ps(&id).await;
        if !ps.contains("sleep 4242") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the exec'd process outlived its client:\n{ps}\nberthd log:\n{}",
            log_tail(&h.berthd)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The container itself keeps running.
    assert_eq!(
        h.status(&id).await.state,
        ContainerState::ContainerRunning as i32
    );
    h.remove_pod(&pod).await;
}
