//! Containers against a real berthd: a busybox image built from the host's
//! Debian busybox, pushed to a local registry and pulled through CRI, then
//! run in pod sandboxes.
//!
//! Each test starts its own berthd, registry and CNI network (a bridge
//! named `bc<pid % 1000>x<n>`, the subnet `10.<150 + pid % 50>.<n>.0/24`,
//! a host-local `dataDir` inside the test's temp dir) and uses cgroup
//! parents under `/berth-ct-<pid>-<n>`. A [`Harness`] guard removes what a
//! failed test left: pods (through berthd), the shims berthd started for
//! this test, processes in the test's own cgroups, the cgroups, mounts under
//! the temp dir, and the bridge.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use berth_tests::host::{cgroup_hierarchies, cgroup_subtree, log_tail, mounts_under, read_procs};
use berth_tests::registry::{Layer, RawTar, TestImage, TestRegistry};
use berth_tests::Berthd;
use cri_api::v1::runtime_service_client::RuntimeServiceClient;
use cri_api::v1::{
    ContainerConfig, ContainerMetadata, ContainerState, ContainerStatus, ContainerStatusRequest,
    CreateContainerRequest, ExecSyncRequest, ImageSpec, KeyValue, LinuxContainerConfig,
    LinuxContainerResources, LinuxContainerSecurityContext, LinuxPodSandboxConfig,
    LinuxSandboxSecurityContext, NamespaceMode, NamespaceOption, PodSandboxConfig,
    PodSandboxMetadata, PullImageRequest, RemoveContainerRequest, RemovePodSandboxRequest,
    RunPodSandboxRequest, StartContainerRequest, StopContainerRequest, StopPodSandboxRequest,
    UpdateContainerResourcesRequest,
};
use serde_json::json;
use tonic::transport::Channel;

/// How long anything that settles asynchronously may take.
const SETTLE: Duration = Duration::from_secs(20);

fn pid() -> u32 {
    std::process::id()
}

// ---------------------------------------------------------------------------
// Host helpers (as in tests/sandbox.rs)
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// The busybox image
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// Configs
// ---------------------------------------------------------------------------

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

fn with_pid(mut config: ContainerConfig, mode: NamespaceMode, target_id: &str) -> ContainerConfig {
    config.linux = Some(LinuxContainerConfig {
        security_context: Some(LinuxContainerSecurityContext {
            namespace_options: Some(NamespaceOption {
                pid: mode as i32,
                target_id: target_id.to_string(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    config
}

// ---------------------------------------------------------------------------
// The harness
// ---------------------------------------------------------------------------

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

/// The message lines of a CRI log file (`<time> <stream> <tag> <line>`).
fn log_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| line.splitn(4, ' ').nth(3).unwrap_or_default().to_string())
        .collect()
}

fn log_file(pod_config: &PodSandboxConfig, status: &ContainerStatus) -> PathBuf {
    let expected = Path::new(&pod_config.log_directory).join(format!(
        "{}.log",
        status.metadata.clone().unwrap_or_default().name
    ));
    assert_eq!(
        Path::new(&status.log_path),
        expected,
        "log_path is log_directory + the container's log_path"
    );
    expected
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn pid_target_debug_container_sees_the_target_processes() {
    let harness = Harness::start(1).await;
    let image = harness.image.clone();
    let (pod, pod_cfg) = harness.run_pod("target", NamespaceMode::Container).await;

    let app = harness
        .create_ok(
            &pod,
            &pod_cfg,
            container_config("app", &image, &["/bin/sleep", "1000"]),
        )
        .await;
    harness.start_container(&app).await;
    harness
        .wait_state(&app, ContainerState::ContainerRunning)
        .await;

    // The debug container joins app's pid namespace and sees its sleep.
    let debug = harness
        .create_ok(
            &pod,
            &pod_cfg,
            with_pid(
                container_config("debug", &image, &["/bin/ps", "-o", "pid,args"]),
                NamespaceMode::Target,
                &app,
            ),
        )
        .await;
    harness.start_container(&debug).await;
    let status = harness
        .wait_state(&debug, ContainerState::ContainerExited)
        .await;
    assert_eq!(status.exit_code, 0, "ps in debug: {status:?}");
    let lines = log_lines(&log_file(&pod_cfg, &status));
    assert!(
        lines.iter().any(|line| line.contains("sleep 1000")),
        "the debug container (pid TARGET {app}) does not see `sleep 1000`: {lines:?}"
    );

    // Control: a container with its own pid namespace does not.
    let control = harness
        .create_ok(
            &pod,
            &pod_cfg,
            with_pid(
                container_config("control", &image, &["/bin/ps", "-o", "pid,args"]),
                NamespaceMode::Container,
                "",
            ),
        )
        .await;
    harness.start_container(&control).await;
    let status = harness
        .wait_state(&control, ContainerState::ContainerExited)
        .await;
    assert_eq!(status.exit_code, 0, "ps in control: {status:?}");
    let lines = log_lines(&log_file(&pod_cfg, &status));
    assert!(
        lines.iter().any(|line| line.contains("ps")),
        "control ps printed nothing: {lines:?}"
    );
    assert!(
        !lines.iter().any(|line| line.contains("sleep 1000")),
        "a pid CONTAINER container sees app's processes: {lines:?}"
    );

    // Unknown target.
    let missing = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    let err = harness
        .create(
            &pod,
            &pod_cfg,
            with_pid(
                container_config("debug-missing", &image, &["/bin/ps"]),
                NamespaceMode::Target,
                missing,
            ),
        )
        .await
        .expect_err("target_id of an unknown container must fail");
    assert_eq!(err.code(), tonic::Code::NotFound, "{err:?}");
    assert!(err.message().contains(missing), "{err:?}");

    // A target in another pod sandbox.
    let (other_pod, other_cfg) = harness.run_pod("other", NamespaceMode::Container).await;
    let other = harness
        .create_ok(
            &other_pod,
            &other_cfg,
            container_config("other-app", &image, &["/bin/sleep", "1000"]),
        )
        .await;
    harness.start_container(&other).await;
    harness
        .wait_state(&other, ContainerState::ContainerRunning)
        .await;
    let err = harness
        .create(
            &pod,
            &pod_cfg,
            with_pid(
                container_config("debug-other", &image, &["/bin/ps"]),
                NamespaceMode::Target,
                &other,
            ),
        )
        .await
        .expect_err("a target in another sandbox must fail");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    assert!(err.message().contains("another pod sandbox"), "{err:?}");
    assert!(err.message().contains(&other), "{err:?}");

    // A target that is created but not running.
    let idle = harness
        .create_ok(
            &pod,
            &pod_cfg,
            container_config("idle", &image, &["/bin/sleep", "1000"]),
        )
        .await;
    assert_eq!(
        harness.status(&idle).await.state,
        ContainerState::ContainerCreated as i32
    );
    let err = harness
        .create(
            &pod,
            &pod_cfg,
            with_pid(
                container_config("debug-idle", &image, &["/bin/ps"]),
                NamespaceMode::Target,
                &idle,
            ),
        )
        .await
        .expect_err("a target that is not running must fail");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    assert!(err.message().contains("not running"), "{err:?}");
    assert!(err.message().contains(&idle), "{err:?}");

    harness.remove_pod(&other_pod).await;
    harness.remove_pod(&pod).await;
    let mounts = mounts_under(harness.berthd.sandbox.dir.path());
    assert!(mounts.is_empty(), "mounts left: {mounts:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn containers_survive_a_berthd_sigkill() {
    let mut harness = Harness::start(2).await;
    let image = harness.image.clone();
    let (pod, pod_cfg) = harness.run_pod("survivor", NamespaceMode::Pod).await;

    let ticker = harness
        .create_ok(
            &pod,
            &pod_cfg,
            container_config(
                "ticker",
                &image,
                &[
                    "/bin/sh",
                    "-c",
                    "i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.2; done",
                ],
            ),
        )
        .await;
    let quitter = harness
        .create_ok(
            &pod,
            &pod_cfg,
            container_config("quitter", &image, &["/bin/sh", "-c", "sleep 2; exit 7"]),
        )
        .await;
    harness.start_container(&ticker).await;
    harness.start_container(&quitter).await;
    let status = harness
        .wait_state(&ticker, ContainerState::ContainerRunning)
        .await;
    let ticker_log = log_file(&pod_cfg, &status);
    assert_eq!(
        harness.status(&quitter).await.state,
        ContainerState::ContainerRunning as i32,
        "quitter should still be sleeping"
    );

    let status = harness
        .berthd
        .restart_on_same_dirs(nix::sys::signal::Signal::SIGKILL, Duration::from_secs(3));
    assert!(!status.success(), "berthd survived SIGKILL: {status}");
    let ticks_at_restart = log_lines(&ticker_log)
        .iter()
        .filter(|line| line.starts_with("tick "))
        .count();

    let status = harness.status(&ticker).await;
    assert_eq!(
        status.state,
        ContainerState::ContainerRunning as i32,
        "ticker after the restart: {status:?}"
    );
    let status = harness.status(&quitter).await;
    assert_eq!(
        status.state,
        ContainerState::ContainerExited as i32,
        "quitter after the restart: {status:?}"
    );
    assert_eq!(status.exit_code, 7, "{status:?}");
    assert_eq!(status.reason, "Error", "{status:?}");
    assert!(status.finished_at > status.started_at, "{status:?}");

    // The log keeps growing: new ticks after the restart.
    let deadline = Instant::now() + SETTLE;
    loop {
        let ticks = log_lines(&ticker_log)
            .iter()
            .filter(|line| line.starts_with("tick "))
            .count();
        if ticks >= ticks_at_restart + 3 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "ticker log stuck at {ticks} ticks (had {ticks_at_restart} at restart)"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // ExecSync through the surviving shim.
    let exec = harness
        .client()
        .await
        .exec_sync(ExecSyncRequest {
            container_id: ticker.clone(),
            cmd: vec!["/bin/echo".to_string(), "still here".to_string()],
            timeout: 10,
        })
        .await
        .unwrap_or_else(|status| panic!("ExecSync after the restart: {status:?}"))
        .into_inner();
    assert_eq!(exec.exit_code, 0, "{exec:?}");
    assert_eq!(String::from_utf8_lossy(&exec.stdout), "still here\n");

    harness
        .client()
        .await
        .stop_container(StopContainerRequest {
            container_id: ticker.clone(),
            timeout: 2,
        })
        .await
        .unwrap_or_else(|status| panic!("StopContainer after the restart: {status:?}"));
    let status = harness.status(&ticker).await;
    assert_eq!(
        status.state,
        ContainerState::ContainerExited as i32,
        "ticker after StopContainer: {status:?}"
    );

    let mut client = harness.client().await;
    for id in [&ticker, &quitter] {
        client
            .remove_container(RemoveContainerRequest {
                container_id: id.to_string(),
            })
            .await
            .unwrap_or_else(|status| panic!("RemoveContainer {id}: {status:?}"));
    }
    harness.remove_pod(&pod).await;
    let mounts = mounts_under(harness.berthd.sandbox.dir.path());
    assert!(mounts.is_empty(), "mounts left: {mounts:?}");
    let shims = pids_mentioning(&harness.berthd.sandbox.dir.path().display().to_string());
    assert!(shims.is_empty(), "shims left running: {shims:?}");
}

/// The memory cgroup v1 limit of a running process, found through
/// `/proc/<pid>/cgroup` (this host's cgroups are v1 hybrid).
fn memory_limit_of(pid: i64) -> i64 {
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("proc cgroup");
    let path = cgroups
        .lines()
        .find_map(|line| {
            let mut parts = line.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            controllers
                .split(',')
                .any(|c| c == "memory")
                .then(|| path.to_string())
        })
        .expect("a memory cgroup");
    std::fs::read_to_string(format!("/sys/fs/cgroup/memory{path}/memory.limit_in_bytes"))
        .expect("memory.limit_in_bytes")
        .trim()
        .parse()
        .expect("a number")
}

#[tokio::test(flavor = "multi_thread")]
async fn update_resources_reach_the_cgroup_and_the_status() {
    let harness = Harness::start(3).await;
    let image = harness.image.clone();
    let (pod, pod_cfg) = harness.run_pod("update", NamespaceMode::Container).await;
    let mut config = container_config("app", &image, &["/bin/sleep", "1000"]);
    config.linux = Some(LinuxContainerConfig {
        resources: Some(LinuxContainerResources {
            memory_limit_in_bytes: 64 << 20,
            cpu_shares: 256,
            ..Default::default()
        }),
        ..Default::default()
    });
    let app = harness.create_ok(&pod, &pod_cfg, config).await;
    harness.start_container(&app).await;
    harness
        .wait_state(&app, ContainerState::ContainerRunning)
        .await;
    let created = harness.status(&app).await.resources.and_then(|r| r.linux);
    assert_eq!(
        created
            .as_ref()
            .map(|r| (r.memory_limit_in_bytes, r.cpu_shares)),
        Some((64 << 20, 256)),
        "resources at creation: {created:?}"
    );

    harness
        .client()
        .await
        .update_container_resources(UpdateContainerResourcesRequest {
            container_id: app.clone(),
            linux: Some(LinuxContainerResources {
                memory_limit_in_bytes: 128 << 20,
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .expect("UpdateContainerResources");

    let info = harness
        .client()
        .await
        .container_status(ContainerStatusRequest {
            container_id: app.clone(),
            verbose: true,
        })
        .await
        .expect("ContainerStatus")
        .into_inner();
    let verbose: serde_json::Value =
        serde_json::from_str(&info.info["info"]).expect("verbose info is JSON");
    let pid = verbose["pid"].as_i64().expect("pid in verbose info");
    assert_eq!(memory_limit_of(pid), 128 << 20, "the cgroup got the update");
    let updated = info.status.and_then(|s| s.resources).and_then(|r| r.linux);
    assert_eq!(
        updated
            .as_ref()
            .map(|r| (r.memory_limit_in_bytes, r.cpu_shares)),
        Some((128 << 20, 256)),
        "status reports the update, and keeps what it did not change: {updated:?}"
    );
    harness.remove_pod(&pod).await;
}
