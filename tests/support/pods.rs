//! Pods and containers against a real berthd, for integration tests: a
//! busybox image built from the host's Debian busybox, pushed to a local
//! registry and pulled through CRI, and a [`Harness`] that runs pods in
//! cgroups of the test's own and cleans up whatever a failed test left.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::host::log_tail;
use crate::node::Node;
use crate::registry::{Layer, RawTar, TestImage, TestRegistry};
use cri_api::v1::runtime_service_client::RuntimeServiceClient;
use cri_api::v1::{
    ContainerConfig, ContainerMetadata, ContainerState, ContainerStatus, ContainerStatusRequest,
    CreateContainerRequest, ImageSpec, KeyValue, LinuxContainerConfig,
    LinuxContainerSecurityContext, LinuxPodSandboxConfig, LinuxSandboxSecurityContext,
    NamespaceMode, NamespaceOption, PodSandboxConfig, PodSandboxMetadata, PullImageRequest,
    RemoveContainerRequest, RemovePodSandboxRequest, RunPodSandboxRequest, StartContainerRequest,
    StopContainerRequest, StopPodSandboxRequest,
};
use tonic::transport::Channel;

/// How long anything that settles asynchronously may take.
pub const SETTLE: Duration = Duration::from_secs(20);

pub fn pid() -> u32 {
    std::process::id()
}

// ---------------------------------------------------------------------------
// Host helpers (as in tests/sandbox.rs)
// ---------------------------------------------------------------------------

/// Pids of the shims whose command line mentions `needle` (the shims
/// berthd started for this test name the test's temp dir).
pub fn pids_mentioning(needle: &str) -> Vec<i32> {
    crate::host::processes_with(&["berth-shim", needle])
}

// ---------------------------------------------------------------------------
// The busybox image
// ---------------------------------------------------------------------------

/// A layer with the host's dynamic busybox, the libraries it loads, applet
/// links and an /etc/passwd with root.
pub fn busybox_layer_tar() -> Vec<u8> {
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
    for applet in ["sh", "sleep", "ps", "echo", "cat", "true", "dd"] {
        tar = tar.symlink(&format!("bin/{applet}"), "busybox");
    }
    tar.file("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n", 0o644)
        .file("etc/group", b"root:x:0:\n", 0o644)
        .finish()
}

// ---------------------------------------------------------------------------
// Configs
// ---------------------------------------------------------------------------

pub fn pod_config(
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

pub fn container_config(name: &str, image: &str, command: &[&str]) -> ContainerConfig {
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
            value: b"/bin".to_vec(),
        }],
        log_path: format!("{name}.log"),
        ..Default::default()
    }
}

pub fn with_pid(
    mut config: ContainerConfig,
    mode: NamespaceMode,
    target_id: &str,
) -> ContainerConfig {
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

pub struct Harness {
    /// berthd, its network and cgroup root, and the clean-up guard.
    pub node: Node,
    pub registry: TestRegistry,
    pub image: String,
}

impl std::ops::Deref for Harness {
    type Target = Node;

    fn deref(&self) -> &Node {
        &self.node
    }
}

impl std::ops::DerefMut for Harness {
    fn deref_mut(&mut self) -> &mut Node {
        &mut self.node
    }
}

impl Harness {
    /// Starts berthd (cgroupfs) on a node of its own, a registry with the
    /// busybox image, and pulls the image through CRI.
    pub async fn start() -> Self {
        Self::start_on(Node::start(&[])).await
    }

    /// As [`Harness::start`], on a node the caller started.
    pub async fn start_on(node: Node) -> Self {
        let registry = TestRegistry::start();
        let harness = Self {
            image: registry.reference("test/busybox:1"),
            registry,
            node,
        };
        let image = TestImage::new(vec![Layer::gzip(busybox_layer_tar())]);
        harness.push_and_pull("test/busybox", &image).await;
        harness
    }

    /// Pushes `image` to the registry as `REPO:1` and pulls it through CRI;
    /// returns the image ref PullImage answered.
    pub async fn push_and_pull(&self, repo: &str, image: &TestImage) -> String {
        self.registry.push_image(repo, &["1"], image).await;
        let reference = self.registry.reference(&format!("{repo}:1"));
        self.berthd
            .image_client()
            .await
            .pull_image(PullImageRequest {
                image: Some(ImageSpec {
                    image: reference.clone(),
                    ..Default::default()
                }),
                auth: None,
                sandbox_config: None,
            })
            .await
            .unwrap_or_else(|status| panic!("PullImage {reference}: {status:?}"))
            .into_inner()
            .image_ref
    }

    pub fn parent(&self, name: &str) -> String {
        format!("{}/{name}", self.cgroup_root)
    }

    pub fn log_dir(&self, pod: &str) -> PathBuf {
        self.berthd.sandbox.dir.path().join("logs").join(pod)
    }

    pub async fn client(&self) -> RuntimeServiceClient<Channel> {
        self.berthd.runtime_client().await
    }

    pub async fn run_pod(&self, name: &str, pid_mode: NamespaceMode) -> (String, PodSandboxConfig) {
        self.run_pod_under(name, pid_mode, "").await
    }

    /// A pod under the RuntimeClass handler `handler` ("" for the default).
    pub async fn run_pod_under(
        &self,
        name: &str,
        pid_mode: NamespaceMode,
        handler: &str,
    ) -> (String, PodSandboxConfig) {
        let config = pod_config(name, &self.parent(name), &self.log_dir(name), pid_mode);
        let id = self
            .client()
            .await
            .run_pod_sandbox(RunPodSandboxRequest {
                config: Some(config.clone()),
                runtime_handler: handler.to_string(),
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

    pub async fn create(
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

    pub async fn create_ok(
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

    /// Creates and starts a container, and waits until it runs.
    pub async fn run_container(
        &self,
        pod: &str,
        pod_config: &PodSandboxConfig,
        config: ContainerConfig,
    ) -> String {
        let id = self.create_ok(pod, pod_config, config).await;
        self.start_container(&id).await;
        self.wait_state(&id, ContainerState::ContainerRunning).await;
        id
    }

    pub async fn start_container(&self, id: &str) {
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

    pub async fn status(&self, id: &str) -> ContainerStatus {
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

    pub async fn wait_state(&self, id: &str, wanted: ContainerState) -> ContainerStatus {
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

    pub async fn stop_container(&self, id: &str, timeout: i64) {
        self.client()
            .await
            .stop_container(StopContainerRequest {
                container_id: id.to_string(),
                timeout,
            })
            .await
            .unwrap_or_else(|status| panic!("StopContainer {id}: {status:?}"));
    }

    pub async fn remove_container(&self, id: &str) {
        self.client()
            .await
            .remove_container(RemoveContainerRequest {
                container_id: id.to_string(),
            })
            .await
            .unwrap_or_else(|status| panic!("RemoveContainer {id}: {status:?}"));
    }

    /// Stops and removes a pod (its containers go with it).
    pub async fn remove_pod(&self, id: &str) {
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
