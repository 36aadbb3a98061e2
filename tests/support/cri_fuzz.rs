//! Generated CRI requests for the fuzz test (`tests/fuzz.rs`): a seeded
//! PRNG, palettes of awkward values (ids, paths, strings, numbers, enum
//! values) and one generator per RPC of `RuntimeService` and
//! `ImageService`.
//!
//! Hand-written rather than `arbitrary`-derived: the prost types have no
//! `Arbitrary` impls, and a purely random message almost never gets past
//! the first required field; these mix real ids and mostly-valid configs
//! with one or a few bad fields, which is what reaches the deep code.
//!
//! What a generated request may do to the host is bounded on purpose:
//! commands are harmless (`true`, `sleep 1`), mount and device sources are
//! in the fuzz scratch dir or harmless device nodes, mount propagation is
//! never bidirectional, cgroup parents are under the node's own root, log
//! directories are in the scratch dir, and every path that tries to climb
//! out of where it belongs would land in the scratch dir (named
//! `*escape*`), where the test looks for it.

use std::collections::HashMap;
use std::path::PathBuf;

use cri_api::v1::*;

/// splitmix64: tiny, seedable, good enough to pick values.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// True once in `n`.
    pub fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// What the generators draw real values from: the pods, containers and
/// images berthd has, and the places the fuzzer may point paths at.
pub struct World {
    pub pods: Vec<String>,
    /// The configs the pods were run with (by id), for CreateContainer.
    pub pod_configs: HashMap<String, PodSandboxConfig>,
    pub containers: Vec<String>,
    /// The image pulled at start-up: its reference and its id.
    pub image: String,
    pub image_id: String,
    /// `127.0.0.1:PORT` of the test registry.
    pub registry: String,
    /// A directory of the test's own: mount sources, profiles, log dirs.
    pub scratch: PathBuf,
    /// The node's cgroup root (pods go below it).
    pub cgroup_root: String,
    /// Unique suffixes for names.
    pub counter: u64,
}

impl World {
    fn next(&mut self) -> u64 {
        self.counter += 1;
        self.counter
    }

    fn scratch(&self, rest: &str) -> String {
        format!("{}/{rest}", self.scratch.display())
    }

    /// A path that climbs from `/` (or from wherever it is joined) up to
    /// the root and back down into the scratch dir: if any code joins it
    /// without confining it, the file lands where the test looks.
    fn escape(&self, what: &str) -> String {
        format!(
            "/../../../../../../../..{}/escape-{what}",
            self.scratch.display()
        )
    }
}

/// One generated request.
// One Call exists at a time: boxing the big variants would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Call {
    Version(VersionRequest),
    RunPodSandbox(RunPodSandboxRequest),
    StopPodSandbox(StopPodSandboxRequest),
    RemovePodSandbox(RemovePodSandboxRequest),
    PodSandboxStatus(PodSandboxStatusRequest),
    ListPodSandbox(ListPodSandboxRequest),
    StreamPodSandboxes(StreamPodSandboxesRequest),
    CreateContainer(CreateContainerRequest),
    StartContainer(StartContainerRequest),
    StopContainer(StopContainerRequest),
    RemoveContainer(RemoveContainerRequest),
    ListContainers(ListContainersRequest),
    StreamContainers(StreamContainersRequest),
    ContainerStatus(ContainerStatusRequest),
    UpdateContainerResources(UpdateContainerResourcesRequest),
    ReopenContainerLog(ReopenContainerLogRequest),
    ExecSync(ExecSyncRequest),
    Exec(ExecRequest),
    Attach(AttachRequest),
    PortForward(PortForwardRequest),
    ContainerStats(ContainerStatsRequest),
    ListContainerStats(ListContainerStatsRequest),
    StreamContainerStats(StreamContainerStatsRequest),
    PodSandboxStats(PodSandboxStatsRequest),
    ListPodSandboxStats(ListPodSandboxStatsRequest),
    StreamPodSandboxStats(StreamPodSandboxStatsRequest),
    UpdateRuntimeConfig(UpdateRuntimeConfigRequest),
    Status(StatusRequest),
    CheckpointContainer(CheckpointContainerRequest),
    GetContainerEvents(GetEventsRequest),
    ListMetricDescriptors(ListMetricDescriptorsRequest),
    ListPodSandboxMetrics(ListPodSandboxMetricsRequest),
    StreamPodSandboxMetrics(StreamPodSandboxMetricsRequest),
    RuntimeConfig(RuntimeConfigRequest),
    UpdatePodSandboxResources(UpdatePodSandboxResourcesRequest),
    ListImages(ListImagesRequest),
    StreamImages(StreamImagesRequest),
    ImageStatus(ImageStatusRequest),
    PullImage(PullImageRequest),
    RemoveImage(RemoveImageRequest),
    ImageFsInfo(ImageFsInfoRequest),
}

/// The RPCs [`generate`] covers, by number: all of both services.
pub const RPC_NAMES: [&str; 41] = [
    "Version",
    "RunPodSandbox",
    "StopPodSandbox",
    "RemovePodSandbox",
    "PodSandboxStatus",
    "ListPodSandbox",
    "StreamPodSandboxes",
    "CreateContainer",
    "StartContainer",
    "StopContainer",
    "RemoveContainer",
    "ListContainers",
    "StreamContainers",
    "ContainerStatus",
    "UpdateContainerResources",
    "ReopenContainerLog",
    "ExecSync",
    "Exec",
    "Attach",
    "PortForward",
    "ContainerStats",
    "ListContainerStats",
    "StreamContainerStats",
    "PodSandboxStats",
    "ListPodSandboxStats",
    "StreamPodSandboxStats",
    "UpdateRuntimeConfig",
    "Status",
    "CheckpointContainer",
    "GetContainerEvents",
    "ListMetricDescriptors",
    "ListPodSandboxMetrics",
    "StreamPodSandboxMetrics",
    "RuntimeConfig",
    "UpdatePodSandboxResources",
    "ListImages",
    "StreamImages",
    "ImageStatus",
    "PullImage",
    "RemoveImage",
    "ImageFsInfo",
];
pub const RPCS: usize = RPC_NAMES.len();

/// One request for RPC number `which` (`0..RPCS`).
pub fn generate(rng: &mut Rng, world: &mut World, which: usize) -> Call {
    match which {
        0 => Call::Version(VersionRequest {
            version: string(rng, world),
        }),
        1 => Call::RunPodSandbox(RunPodSandboxRequest {
            config: maybe(rng, 20, |rng| pod_config(rng, world)),
            runtime_handler: if rng.one_in(4) {
                string(rng, world)
            } else {
                String::new()
            },
        }),
        2 => Call::StopPodSandbox(StopPodSandboxRequest {
            pod_sandbox_id: pod_id(rng, world),
        }),
        3 => Call::RemovePodSandbox(RemovePodSandboxRequest {
            pod_sandbox_id: pod_id(rng, world),
        }),
        4 => Call::PodSandboxStatus(PodSandboxStatusRequest {
            pod_sandbox_id: pod_id(rng, world),
            verbose: rng.one_in(2),
        }),
        5 => Call::ListPodSandbox(ListPodSandboxRequest {
            filter: maybe(rng, 3, |rng| pod_filter(rng, world)),
        }),
        6 => Call::StreamPodSandboxes(StreamPodSandboxesRequest {
            filter: maybe(rng, 3, |rng| pod_filter(rng, world)),
        }),
        7 => Call::CreateContainer(create_container(rng, world)),
        8 => Call::StartContainer(StartContainerRequest {
            container_id: container_id(rng, world),
        }),
        9 => Call::StopContainer(StopContainerRequest {
            container_id: container_id(rng, world),
            timeout: timeout(rng),
        }),
        10 => Call::RemoveContainer(RemoveContainerRequest {
            container_id: container_id(rng, world),
        }),
        11 => Call::ListContainers(ListContainersRequest {
            filter: maybe(rng, 3, |rng| container_filter(rng, world)),
        }),
        12 => Call::StreamContainers(StreamContainersRequest {
            filter: maybe(rng, 3, |rng| container_filter(rng, world)),
        }),
        13 => Call::ContainerStatus(ContainerStatusRequest {
            container_id: container_id(rng, world),
            verbose: rng.one_in(2),
        }),
        14 => Call::UpdateContainerResources(UpdateContainerResourcesRequest {
            container_id: container_id(rng, world),
            linux: maybe(rng, 6, |rng| resources(rng, world)),
            windows: maybe(rng, 1, windows_resources),
            annotations: map(rng, world),
        }),
        15 => Call::ReopenContainerLog(ReopenContainerLogRequest {
            container_id: container_id(rng, world),
        }),
        16 => Call::ExecSync(ExecSyncRequest {
            container_id: container_id(rng, world),
            cmd: command(rng, world),
            timeout: exec_timeout(rng),
        }),
        17 => Call::Exec(ExecRequest {
            container_id: container_id(rng, world),
            cmd: command(rng, world),
            tty: rng.one_in(2),
            stdin: rng.one_in(2),
            stdout: rng.one_in(2),
            stderr: rng.one_in(2),
        }),
        18 => Call::Attach(AttachRequest {
            container_id: container_id(rng, world),
            stdin: rng.one_in(2),
            tty: rng.one_in(2),
            stdout: rng.one_in(2),
            stderr: rng.one_in(2),
        }),
        19 => Call::PortForward(PortForwardRequest {
            pod_sandbox_id: pod_id(rng, world),
            port: (0..rng.below(5)).map(|_| int32(rng)).collect(),
        }),
        20 => Call::ContainerStats(ContainerStatsRequest {
            container_id: container_id(rng, world),
        }),
        21 => Call::ListContainerStats(ListContainerStatsRequest {
            filter: maybe(rng, 3, |rng| container_stats_filter(rng, world)),
        }),
        22 => Call::StreamContainerStats(StreamContainerStatsRequest {
            filter: maybe(rng, 3, |rng| container_stats_filter(rng, world)),
        }),
        23 => Call::PodSandboxStats(PodSandboxStatsRequest {
            pod_sandbox_id: pod_id(rng, world),
        }),
        24 => Call::ListPodSandboxStats(ListPodSandboxStatsRequest {
            filter: maybe(rng, 3, |rng| pod_stats_filter(rng, world)),
        }),
        25 => Call::StreamPodSandboxStats(StreamPodSandboxStatsRequest {
            filter: maybe(rng, 3, |rng| pod_stats_filter(rng, world)),
        }),
        26 => Call::UpdateRuntimeConfig(UpdateRuntimeConfigRequest {
            runtime_config: maybe(rng, 10, |rng| RuntimeConfig {
                network_config: maybe(rng, 10, |rng| NetworkConfig {
                    pod_cidr: cidr(rng, world),
                }),
            }),
        }),
        27 => Call::Status(StatusRequest {
            verbose: rng.one_in(2),
        }),
        28 => Call::CheckpointContainer(CheckpointContainerRequest {
            container_id: container_id(rng, world),
            location: path(rng, world),
            timeout: int64(rng),
        }),
        29 => Call::GetContainerEvents(GetEventsRequest {}),
        30 => Call::ListMetricDescriptors(ListMetricDescriptorsRequest {}),
        31 => Call::ListPodSandboxMetrics(ListPodSandboxMetricsRequest {}),
        32 => Call::StreamPodSandboxMetrics(StreamPodSandboxMetricsRequest {}),
        33 => Call::RuntimeConfig(RuntimeConfigRequest {}),
        34 => Call::UpdatePodSandboxResources(UpdatePodSandboxResourcesRequest {
            pod_sandbox_id: pod_id(rng, world),
            overhead: maybe(rng, 2, |rng| resources(rng, world)),
            resources: maybe(rng, 2, |rng| resources(rng, world)),
        }),
        35 => Call::ListImages(ListImagesRequest {
            filter: maybe(rng, 3, |rng| ImageFilter {
                image: maybe(rng, 6, |rng| image_spec(rng, world)),
            }),
        }),
        36 => Call::StreamImages(StreamImagesRequest {
            filter: maybe(rng, 3, |rng| ImageFilter {
                image: maybe(rng, 6, |rng| image_spec(rng, world)),
            }),
        }),
        37 => Call::ImageStatus(ImageStatusRequest {
            image: maybe(rng, 10, |rng| image_spec(rng, world)),
            verbose: rng.one_in(2),
        }),
        38 => Call::PullImage(PullImageRequest {
            image: maybe(rng, 10, |rng| pull_spec(rng, world)),
            auth: maybe(rng, 3, |rng| auth(rng, world)),
            sandbox_config: maybe(rng, 4, |rng| pod_config(rng, world)),
        }),
        39 => Call::RemoveImage(RemoveImageRequest {
            image: maybe(rng, 10, |rng| image_spec(rng, world)),
        }),
        _ => Call::ImageFsInfo(ImageFsInfoRequest {}),
    }
}

// ---------------------------------------------------------------------------
// Scalars
// ---------------------------------------------------------------------------

/// `Some(make())` except once in `none_in`.
fn maybe<T>(rng: &mut Rng, none_in: usize, make: impl FnOnce(&mut Rng) -> T) -> Option<T> {
    if rng.one_in(none_in.max(1)) {
        None
    } else {
        Some(make(rng))
    }
}

pub fn int64(rng: &mut Rng) -> i64 {
    match rng.below(10) {
        0 => 0,
        1 => -1,
        2 => i64::MIN,
        3 => i64::MAX,
        4 => i64::from(i32::MAX) + 1,
        5 => rng.next_u64() as i64,
        6 => -(rng.below(1_000_000) as i64),
        _ => rng.below(1 << 20) as i64,
    }
}

fn int32(rng: &mut Rng) -> i32 {
    match rng.below(6) {
        0 => 0,
        1 => -1,
        2 => i32::MIN,
        3 => i32::MAX,
        4 => 65536 + rng.below(1000) as i32,
        _ => rng.below(65536) as i32,
    }
}

fn uint32(rng: &mut Rng) -> u32 {
    match rng.below(4) {
        0 => 0,
        1 => u32::MAX,
        _ => rng.below(100_000) as u32,
    }
}

/// An enum field: mostly defined values, sometimes one the proto does not
/// define.
fn enumeration(rng: &mut Rng, defined: i32) -> i32 {
    match rng.below(8) {
        0 => -1,
        1 => defined + rng.below(1000) as i32,
        2 => i32::MAX,
        3 => i32::MIN,
        _ => rng.below(defined as usize) as i32,
    }
}

/// Timeouts for StopContainer and ExecSync (seconds): huge ones included,
/// which berthd clamps. Fuzzed containers end within a second, so a huge
/// one never makes a call wait long.
fn timeout(rng: &mut Rng) -> i64 {
    match rng.below(6) {
        0 => int64(rng),
        1 => -1,
        _ => rng.below(3) as i64,
    }
}

/// Timeouts for ExecSync (seconds).
fn exec_timeout(rng: &mut Rng) -> i64 {
    timeout(rng)
}

// ---------------------------------------------------------------------------
// Strings, ids, paths
// ---------------------------------------------------------------------------

/// A string from the awkward palette.
pub fn string(rng: &mut Rng, world: &mut World) -> String {
    match rng.below(24) {
        0 => String::new(),
        1 => " ".into(),
        2 => "a".repeat(1 + rng.below(300)),
        3 => "x".repeat(64 * 1024),
        4 => "..".into(),
        5 => ".".into(),
        6 => "/".into(),
        7 => "../../../etc/passwd".into(),
        8 => "a\0b".into(),
        9 => "\0".into(),
        10 => "\u{202e}\u{fffd}\u{1f4a9}\u{0301}\u{feff}".into(),
        11 => "ß🚀ü\u{10ffff}".repeat(1 + rng.below(50)),
        12 => "line\nbreak\r\ttab".into(),
        13 => "*".into(),
        14 => "%s%n%x{}{{}}$(true)`true`;|&".into(),
        15 => "-".into(),
        16 => "=".into(),
        17 => format!("fuzz-{}", world.next()),
        18 => world.escape("string"),
        19 => "UPPER_case-Mixed.123".into(),
        20 => "a:b:c".into(),
        _ => {
            let len = rng.below(40);
            (0..len)
                .map(|_| (b' ' + rng.below(95) as u8) as char)
                .collect()
        }
    }
}

/// A pod id: a real one, a unique prefix of one, a container's, or junk.
pub fn pod_id(rng: &mut Rng, world: &mut World) -> String {
    let real = world.pods.clone();
    let other = world.containers.clone();
    id(rng, world, &real, &other)
}

pub fn container_id(rng: &mut Rng, world: &mut World) -> String {
    let real = world.containers.clone();
    let other = world.pods.clone();
    id(rng, world, &real, &other)
}

fn id(rng: &mut Rng, world: &mut World, real: &[String], other: &[String]) -> String {
    match rng.below(12) {
        0..=3 if !real.is_empty() => rng.pick(real).clone(),
        4 if !real.is_empty() => {
            let full = rng.pick(real);
            full[..(12 + rng.below(20)).min(full.len())].to_string()
        }
        5 if !real.is_empty() => rng.pick(real)[..1].to_string(),
        6 if !other.is_empty() => rng.pick(other).clone(),
        7 => (0..64)
            .map(|_| char::from(b"0123456789abcdef"[rng.below(16)]))
            .collect(),
        8 if !real.is_empty() => format!("{}/..", rng.pick(real)),
        9 if !real.is_empty() => format!("{}\0", rng.pick(real)),
        _ => string(rng, world),
    }
}

/// A host path: in the scratch dir, escaping to it, relative, or junk.
pub fn path(rng: &mut Rng, world: &mut World) -> String {
    match rng.below(10) {
        0 => String::new(),
        1 => "relative/path".into(),
        2 => "../../..".into(),
        3 => world.escape("path"),
        4 => world.scratch("dir"),
        5 => world.scratch("file"),
        6 => world.scratch(&format!("missing-{}", world.counter)),
        7 => format!("{}/{}", world.scratch.display(), "d/".repeat(300)),
        _ => string(rng, world),
    }
}

/// A path inside a container.
fn container_path(rng: &mut Rng, world: &mut World) -> String {
    match rng.below(12) {
        0 => String::new(),
        1 => "relative".into(),
        2 => "/".into(),
        3 => "/proc".into(),
        4 => "/sys/fs/cgroup".into(),
        5 => "/dev/shm".into(),
        6 => world.escape("container-path"),
        7 => "/etc/hosts".into(),
        8 => format!("/{}", "deep/".repeat(200)),
        9 => "/tmp/x".into(),
        _ => format!("/{}", string(rng, world)),
    }
}

fn map(rng: &mut Rng, world: &mut World) -> HashMap<String, String> {
    let count = match rng.below(10) {
        0 => 300,
        1..=4 => 0,
        _ => rng.below(5),
    };
    (0..count)
        .map(|i| {
            let key = if rng.one_in(3) {
                format!("k{i}")
            } else {
                string(rng, world)
            };
            (key, string(rng, world))
        })
        .collect()
}

fn strings(rng: &mut Rng, world: &mut World) -> Vec<String> {
    (0..rng.below(4)).map(|_| string(rng, world)).collect()
}

fn cidr(rng: &mut Rng, world: &mut World) -> String {
    match rng.below(6) {
        // Valid, but nothing on the node's network declares ipRanges.
        0 => "10.250.0.0/16".into(),
        1 => "fd00::/64".into(),
        2 => "10.0.0.0/33".into(),
        3 => "10.0.0.0/24,".into(),
        _ => string(rng, world),
    }
}

// ---------------------------------------------------------------------------
// Images
// ---------------------------------------------------------------------------

fn image_name(rng: &mut Rng, world: &mut World) -> String {
    match rng.below(10) {
        0..=2 => world.image.clone(),
        3 => world.image_id.clone(),
        4 => world.image_id.trim_start_matches("sha256:")[..12].to_string(),
        5 => {
            let n = world.next();
            format!("{}/nope/{n}:latest", world.registry)
        }
        6 => "busybox".into(),
        7 => "sha256:0000".into(),
        _ => string(rng, world),
    }
}

fn image_spec(rng: &mut Rng, world: &mut World) -> ImageSpec {
    ImageSpec {
        image: image_name(rng, world),
        annotations: map(rng, world),
        user_specified_image: if rng.one_in(4) {
            string(rng, world)
        } else {
            String::new()
        },
        runtime_handler: if rng.one_in(4) {
            string(rng, world)
        } else {
            String::new()
        },
        image_ref: if rng.one_in(4) {
            string(rng, world)
        } else {
            String::new()
        },
    }
}

/// What PullImage may fetch: only the test registry, a closed loopback
/// port, or references that cannot parse, so no pull leaves the machine.
fn pull_spec(rng: &mut Rng, world: &mut World) -> ImageSpec {
    let image = match rng.below(10) {
        0..=1 => world.image.clone(),
        2 => {
            let n = world.next();
            format!("{}/nope/{n}:latest", world.registry)
        }
        3 => format!("127.0.0.1:1/closed/{}:latest", world.next()),
        4 => format!("{}/test/busybox@sha256:{}", world.registry, "0".repeat(64)),
        5 => format!("{}/test/busybox@sha256:zz", world.registry),
        6 => format!("{}/UPPER/Case:tag", world.registry),
        7 => format!("{}/{}", world.registry, "a/".repeat(200)),
        8 => String::new(),
        _ => format!("{}/x:{}", world.registry, "t".repeat(200)),
    };
    ImageSpec {
        image,
        ..Default::default()
    }
}

fn auth(rng: &mut Rng, world: &mut World) -> AuthConfig {
    let mut auth = AuthConfig::default();
    match rng.below(5) {
        0 => {
            auth.username = string(rng, world);
            auth.password = string(rng, world);
        }
        1 => auth.auth = string(rng, world),
        2 => auth.auth = "dXNlcm5vY29sb24=".into(),
        3 => auth.identity_token = string(rng, world),
        _ => auth.registry_token = string(rng, world),
    }
    auth.server_address = string(rng, world);
    auth
}

// ---------------------------------------------------------------------------
// Filters
// ---------------------------------------------------------------------------

fn pod_filter(rng: &mut Rng, world: &mut World) -> PodSandboxFilter {
    PodSandboxFilter {
        id: if rng.one_in(2) {
            pod_id(rng, world)
        } else {
            String::new()
        },
        state: maybe(rng, 2, |rng| PodSandboxStateValue {
            state: enumeration(rng, 2),
        }),
        label_selector: map(rng, world),
    }
}

fn container_filter(rng: &mut Rng, world: &mut World) -> ContainerFilter {
    ContainerFilter {
        id: if rng.one_in(2) {
            container_id(rng, world)
        } else {
            String::new()
        },
        state: maybe(rng, 2, |rng| ContainerStateValue {
            state: enumeration(rng, 4),
        }),
        pod_sandbox_id: if rng.one_in(2) {
            pod_id(rng, world)
        } else {
            String::new()
        },
        label_selector: map(rng, world),
    }
}

fn container_stats_filter(rng: &mut Rng, world: &mut World) -> ContainerStatsFilter {
    ContainerStatsFilter {
        id: if rng.one_in(2) {
            container_id(rng, world)
        } else {
            String::new()
        },
        pod_sandbox_id: if rng.one_in(2) {
            pod_id(rng, world)
        } else {
            String::new()
        },
        label_selector: map(rng, world),
    }
}

fn pod_stats_filter(rng: &mut Rng, world: &mut World) -> PodSandboxStatsFilter {
    PodSandboxStatsFilter {
        id: if rng.one_in(2) {
            pod_id(rng, world)
        } else {
            String::new()
        },
        label_selector: map(rng, world),
    }
}

// ---------------------------------------------------------------------------
// Pods
// ---------------------------------------------------------------------------

/// A pod config: valid at the core, with a few fields made awkward.
pub fn pod_config(rng: &mut Rng, world: &mut World) -> PodSandboxConfig {
    let wild = wild_pod_config(rng, world);
    if rng.one_in(2) {
        return wild;
    }
    // Half the time a valid config with one field taken from the wild one,
    // so that field's handling is reached past the others' checks.
    let n = world.next();
    let mut tame = PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: format!("fz-{n}"),
            uid: format!("uid-{n}"),
            namespace: "fuzz".into(),
            attempt: 0,
        }),
        hostname: format!("fz-{n}"),
        log_directory: world.scratch(&format!("logs/{n}")),
        linux: Some(LinuxPodSandboxConfig {
            cgroup_parent: format!("{}/fz", world.cgroup_root),
            ..Default::default()
        }),
        ..Default::default()
    };
    let linux = wild.linux.clone().unwrap_or_default();
    let tame_linux = tame.linux.get_or_insert_with(Default::default);
    match rng.below(12) {
        0 => tame.metadata = wild.metadata,
        1 => tame.hostname = wild.hostname,
        2 => tame.log_directory = wild.log_directory,
        3 => tame.dns_config = wild.dns_config,
        4 => tame.port_mappings = wild.port_mappings,
        5 => tame.labels = wild.labels,
        6 => tame.annotations = wild.annotations,
        7 => tame_linux.cgroup_parent = linux.cgroup_parent,
        8 => tame_linux.security_context = linux.security_context,
        9 => tame_linux.sysctls = linux.sysctls,
        10 => tame_linux.overhead = linux.overhead,
        _ => tame_linux.resources = linux.resources,
    }
    tame
}

// The deprecated profile fields are still part of the API berthd serves.
#[allow(deprecated)]
fn wild_pod_config(rng: &mut Rng, world: &mut World) -> PodSandboxConfig {
    let n = world.next();
    let weird = |rng: &mut Rng| rng.one_in(8);
    let name = if weird(rng) {
        string(rng, world)
    } else {
        format!("fz-{n}")
    };
    // Where kubelet would keep the pod's logs: any absolute path is the
    // client's to choose, so only shapes and impossible places vary.
    let log_directory = match rng.below(10) {
        0 => String::new(),
        1 => "relative/path".into(),
        2 => world.scratch("file/sub"),
        3 => format!("{}/{}", world.scratch.display(), "d/".repeat(300)),
        4 => world.scratch("logs/nul\0byte"),
        _ => world.scratch(&format!("logs/{n}")),
    };
    PodSandboxConfig {
        metadata: maybe(rng, 20, |rng| PodSandboxMetadata {
            name,
            uid: if weird(rng) {
                string(rng, world)
            } else {
                format!("uid-{n}")
            },
            namespace: if weird(rng) {
                string(rng, world)
            } else {
                "fuzz".into()
            },
            attempt: if weird(rng) { uint32(rng) } else { 0 },
        }),
        hostname: if weird(rng) {
            string(rng, world)
        } else {
            format!("fz-{n}")
        },
        log_directory,
        dns_config: maybe(rng, 2, |rng| DnsConfig {
            servers: strings(rng, world),
            searches: strings(rng, world),
            options: strings(rng, world),
        }),
        port_mappings: (0..rng.below(3))
            .map(|_| PortMapping {
                protocol: enumeration(rng, 3),
                container_port: int32(rng),
                host_port: int32(rng),
                host_ip: string(rng, world),
            })
            .collect(),
        labels: map(rng, world),
        annotations: map(rng, world),
        linux: maybe(rng, 6, |rng| LinuxPodSandboxConfig {
            cgroup_parent: cgroup_parent(rng, world),
            security_context: maybe(rng, 3, |rng| LinuxSandboxSecurityContext {
                namespace_options: maybe(rng, 2, |rng| namespace_options(rng, world)),
                selinux_options: maybe(rng, 4, |rng| selinux(rng, world)),
                run_as_user: maybe(rng, 3, |rng| Int64Value { value: int64(rng) }),
                run_as_group: maybe(rng, 3, |rng| Int64Value { value: int64(rng) }),
                readonly_rootfs: rng.one_in(2),
                supplemental_groups: (0..rng.below(3)).map(|_| int64(rng)).collect(),
                supplemental_groups_policy: enumeration(rng, 2),
                privileged: rng.one_in(3),
                seccomp: maybe(rng, 3, |rng| security_profile(rng, world)),
                apparmor: maybe(rng, 3, |rng| security_profile(rng, world)),
                seccomp_profile_path: if rng.one_in(5) {
                    path(rng, world)
                } else {
                    String::new()
                },
            }),
            sysctls: sysctls(rng, world),
            overhead: maybe(rng, 3, |rng| resources(rng, world)),
            resources: maybe(rng, 3, |rng| resources(rng, world)),
        }),
        windows: None,
    }
}

/// Under the node's root, or shapes that must be refused (escapes would
/// land in a cgroup named after the root, which the test looks for).
fn cgroup_parent(rng: &mut Rng, world: &mut World) -> String {
    let root = world.cgroup_root.clone();
    match rng.below(12) {
        0..=5 => format!("{root}/fz"),
        6 => format!("{root}/../{}-escape", root.trim_start_matches('/')),
        7 => format!("{root}/a\0b"),
        8 => format!("{root}/{}", "x".repeat(300)),
        9 => "relative/parent".into(),
        10 => format!("{root}/fz.slice"),
        _ => format!("{root}/{}", string(rng, world).replace("..", "_")),
    }
}

/// Sysctls whose values can do no harm even if berth wrongly applied them
/// to the host: namespaced keys, or host-wide keys with values the kernel
/// refuses.
fn sysctls(rng: &mut Rng, world: &mut World) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for _ in 0..rng.below(3) {
        let (key, value): (String, String) = match rng.below(10) {
            0 => ("net.ipv4.ip_unprivileged_port_start".into(), "0".into()),
            1 => ("kernel.shm_rmid_forced".into(), "1".into()),
            2 => ("net.ipv4.nope".into(), "1".into()),
            3 => (
                "net.ipv4.ip_unprivileged_port_start".into(),
                "not-a-number".into(),
            ),
            4 => ("kernel.pid_max".into(), "not-a-number".into()),
            5 => ("net/ipv4/../../../tmp/escape".into(), "x".into()),
            6 => ("net..ipv4".into(), "1".into()),
            7 => ("net.ipv4.ip_forward".into(), string(rng, world)),
            8 => (string(rng, world), "not-a-number".into()),
            _ => ("fs.mqueue.msg_max".into(), "not-a-number".into()),
        };
        out.insert(key, value);
    }
    out
}

fn namespace_options(rng: &mut Rng, world: &mut World) -> NamespaceOption {
    NamespaceOption {
        network: enumeration(rng, 4),
        pid: enumeration(rng, 4),
        ipc: enumeration(rng, 4),
        target_id: if rng.one_in(2) {
            container_id(rng, world)
        } else {
            String::new()
        },
        userns_options: maybe(rng, 3, |rng| UserNamespace {
            mode: enumeration(rng, 4),
            uids: id_mappings(rng),
            gids: id_mappings(rng),
        }),
    }
}

fn id_mappings(rng: &mut Rng) -> Vec<IdMapping> {
    (0..rng.below(3))
        .map(|_| IdMapping {
            host_id: uint32(rng),
            container_id: uint32(rng),
            length: uint32(rng),
        })
        .collect()
}

fn selinux(rng: &mut Rng, world: &mut World) -> SeLinuxOption {
    SeLinuxOption {
        user: string(rng, world),
        role: string(rng, world),
        r#type: string(rng, world),
        level: string(rng, world),
    }
}

fn security_profile(rng: &mut Rng, world: &mut World) -> SecurityProfile {
    let localhost_ref = match rng.below(8) {
        0 => world.scratch("seccomp.json"),
        1 => world.scratch("not-json"),
        2 => world.scratch("fifo"),
        3 => "/dev/zero".into(),
        4 => "/dev/null".into(),
        5 => world.scratch("dir"),
        _ => path(rng, world),
    };
    SecurityProfile {
        profile_type: enumeration(rng, 3),
        localhost_ref,
    }
}

fn resources(rng: &mut Rng, world: &mut World) -> LinuxContainerResources {
    let small = |rng: &mut Rng| -> i64 {
        if rng.one_in(2) {
            0
        } else {
            int64(rng)
        }
    };
    LinuxContainerResources {
        cpu_period: small(rng),
        cpu_quota: small(rng),
        cpu_shares: small(rng),
        memory_limit_in_bytes: small(rng),
        oom_score_adj: small(rng),
        cpuset_cpus: match rng.below(5) {
            0 => "0".into(),
            1 => "0-100000".into(),
            2 => string(rng, world),
            _ => String::new(),
        },
        cpuset_mems: match rng.below(5) {
            0 => "0".into(),
            1 => "7-3".into(),
            2 => string(rng, world),
            _ => String::new(),
        },
        hugepage_limits: (0..rng.below(2))
            .map(|_| HugepageLimit {
                page_size: match rng.below(3) {
                    0 => "2MB".into(),
                    1 => "1GB".into(),
                    _ => string(rng, world),
                },
                limit: if rng.one_in(2) {
                    u64::MAX
                } else {
                    rng.next_u64()
                },
            })
            .collect(),
        unified: unified(rng, world),
        memory_swap_limit_in_bytes: small(rng),
    }
}

/// cgroup v2 files: real, unknown, and names that climb out of the
/// container's cgroup, each with a value the kernel refuses, so a write
/// that should not have happened fails instead of changing anything.
fn unified(rng: &mut Rng, world: &mut World) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for _ in 0..rng.below(3) {
        let (key, value) = match rng.below(7) {
            0 => ("memory.high".into(), "max".into()),
            1 => ("memory.max".into(), "fuzz".into()),
            2 => ("../cgroup.procs".into(), "fuzz".into()),
            3 => ("../../../../../memory.max".into(), "fuzz".into()),
            4 => ("cgroup.procs".into(), "fuzz".into()),
            5 => ("pids.max".into(), string(rng, world)),
            _ => (string(rng, world), "fuzz".into()),
        };
        out.insert(key, value);
    }
    out
}

fn windows_resources(rng: &mut Rng) -> WindowsContainerResources {
    WindowsContainerResources {
        cpu_shares: int64(rng),
        cpu_count: int64(rng),
        cpu_maximum: int64(rng),
        memory_limit_in_bytes: int64(rng),
        rootfs_size_in_bytes: int64(rng),
        affinity_cpus: Vec::new(),
    }
}

// ---------------------------------------------------------------------------
// Containers
// ---------------------------------------------------------------------------

/// Commands that are harmless wherever they run, and ones that cannot run.
pub fn command(rng: &mut Rng, world: &mut World) -> Vec<String> {
    let parts: Vec<String> = match rng.below(10) {
        0 => Vec::new(),
        1 | 2 => vec!["/bin/true".into()],
        3 => vec!["/bin/sleep".into(), "1".into()],
        4 => vec!["/nonexistent".into()],
        5 => vec![String::new()],
        6 => vec!["true\0".into()],
        7 => vec![
            "/bin/true".into(),
            "x".repeat(*rng.pick(&[100 * 1024, 200 * 1024])),
        ],
        8 => vec![format!("/nonexistent/{}", string(rng, world))],
        _ => {
            let mut parts = vec!["/bin/true".to_string()];
            parts.extend(strings(rng, world));
            parts
        }
    };
    parts
}

fn create_container(rng: &mut Rng, world: &mut World) -> CreateContainerRequest {
    // Mostly a real pod: what comes after the lookup is what is fuzzed.
    let pod_sandbox_id = if !world.pods.is_empty() && !rng.one_in(4) {
        rng.pick(&world.pods).clone()
    } else {
        pod_id(rng, world)
    };
    let known = world.pod_configs.get(&pod_sandbox_id).cloned();
    let sandbox_config = match rng.below(6) {
        0 => None,
        1 => Some(pod_config(rng, world)),
        _ => known,
    };
    CreateContainerRequest {
        pod_sandbox_id,
        config: maybe(rng, 20, |rng| container_config(rng, world)),
        sandbox_config,
    }
}

/// An env value: bytes since cri-api v0.36.2, so sometimes not UTF-8
/// (a lone continuation byte, a truncated sequence, 0xff).
fn env_value(rng: &mut Rng, world: &mut World) -> Vec<u8> {
    let mut value = string(rng, world).into_bytes();
    match rng.below(4) {
        0 => value.push(0x80),
        1 => value.extend([0xe2, 0x82]),
        2 => value.insert(0, 0xff),
        _ => {}
    }
    value
}

pub fn container_config(rng: &mut Rng, world: &mut World) -> ContainerConfig {
    let wild = wild_container_config(rng, world);
    if rng.one_in(2) {
        return wild;
    }
    // Half the time a valid config with one field taken from the wild one.
    let n = world.next();
    let mut tame = ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: format!("c{n}"),
            attempt: 0,
        }),
        image: Some(ImageSpec {
            image: world.image.clone(),
            ..Default::default()
        }),
        command: vec!["/bin/true".into()],
        log_path: format!("c{n}.log"),
        ..Default::default()
    };
    let linux = wild.linux.clone().unwrap_or_default();
    match rng.below(18) {
        0 => tame.metadata = wild.metadata,
        1 => tame.image = wild.image,
        2 => tame.command = wild.command,
        3 => tame.args = wild.args,
        4 => tame.working_dir = wild.working_dir,
        5 => tame.envs = wild.envs,
        6 => tame.mounts = wild.mounts,
        7 => tame.devices = wild.devices,
        8 => tame.labels = wild.labels,
        9 => tame.annotations = wild.annotations,
        10 => tame.log_path = wild.log_path,
        11 => {
            tame.stdin = wild.stdin;
            tame.stdin_once = wild.stdin_once;
            tame.tty = wild.tty;
        }
        12 | 13 => {
            tame.linux = Some(LinuxContainerConfig {
                resources: linux.resources,
                security_context: None,
            })
        }
        14 | 15 => {
            tame.linux = Some(LinuxContainerConfig {
                resources: None,
                security_context: linux.security_context,
            })
        }
        16 => tame.cdi_devices = wild.cdi_devices,
        _ => tame.stop_signal = wild.stop_signal,
    }
    tame
}

fn wild_container_config(rng: &mut Rng, world: &mut World) -> ContainerConfig {
    let n = world.next();
    let weird = |rng: &mut Rng| rng.one_in(8);
    ContainerConfig {
        metadata: maybe(rng, 20, |rng| ContainerMetadata {
            name: if weird(rng) {
                string(rng, world)
            } else {
                format!("c{n}")
            },
            attempt: if weird(rng) { uint32(rng) } else { 0 },
        }),
        image: maybe(rng, 20, |rng| {
            if weird(rng) {
                image_spec(rng, world)
            } else {
                ImageSpec {
                    image: world.image.clone(),
                    ..Default::default()
                }
            }
        }),
        command: command(rng, world),
        args: if weird(rng) {
            strings(rng, world)
        } else {
            Vec::new()
        },
        working_dir: match rng.below(8) {
            0 => "relative".into(),
            1 => world.escape("working-dir"),
            2 => "/tmp/work".into(),
            3 => string(rng, world),
            _ => String::new(),
        },
        envs: (0..rng.below(4))
            .map(|_| KeyValue {
                key: string(rng, world),
                value: env_value(rng, world),
            })
            .collect(),
        mounts: (0..if rng.one_in(10) { 40 } else { rng.below(3) })
            .map(|_| mount(rng, world))
            .collect(),
        devices: (0..if rng.one_in(10) { 30 } else { rng.below(2) })
            .map(|_| device(rng, world))
            .collect(),
        labels: map(rng, world),
        annotations: map(rng, world),
        log_path: match rng.below(8) {
            0 => String::new(),
            1 => "../escape.log".into(),
            2 => "/abs.log".into(),
            3 => "sub/dir/c.log".into(),
            4 => string(rng, world),
            _ => format!("c{n}.log"),
        },
        stdin: rng.one_in(4),
        stdin_once: rng.one_in(4),
        tty: rng.one_in(4),
        linux: maybe(rng, 4, |rng| LinuxContainerConfig {
            resources: maybe(rng, 3, |rng| resources(rng, world)),
            security_context: maybe(rng, 3, |rng| container_security(rng, world)),
        }),
        windows: None,
        cdi_devices: (0..rng.below(2))
            .map(|_| CdiDevice {
                name: string(rng, world),
            })
            .collect(),
        stop_signal: enumeration(rng, 66),
    }
}

fn mount(rng: &mut Rng, world: &mut World) -> Mount {
    let readonly = rng.one_in(2);
    Mount {
        container_path: container_path(rng, world),
        host_path: match rng.below(6) {
            0 => "/dev/null".into(),
            _ => path(rng, world),
        },
        readonly,
        selinux_relabel: rng.one_in(4),
        // Never BIDIRECTIONAL: that would let mounts made in a container
        // propagate into the host.
        propagation: match rng.below(4) {
            0 => MountPropagation::PropagationHostToContainer as i32,
            1 => 3 + rng.below(100) as i32,
            2 => -1,
            _ => MountPropagation::PropagationPrivate as i32,
        },
        uid_mappings: if rng.one_in(6) {
            id_mappings(rng)
        } else {
            Vec::new()
        },
        gid_mappings: if rng.one_in(6) {
            id_mappings(rng)
        } else {
            Vec::new()
        },
        recursive_read_only: rng.one_in(4),
        image: if rng.one_in(6) {
            Some(image_spec(rng, world))
        } else {
            None
        },
        image_sub_path: if rng.one_in(6) {
            string(rng, world)
        } else {
            String::new()
        },
        // KEP-5855's options, and ones berth must refuse naming the field.
        mount_options: (0..rng.below(3))
            .map(|_| match rng.below(5) {
                0 => "noexec".into(),
                1 => "nodev".into(),
                2 => "nosuid".into(),
                _ => string(rng, world),
            })
            .collect(),
    }
}

fn device(rng: &mut Rng, world: &mut World) -> Device {
    Device {
        container_path: container_path(rng, world),
        host_path: match rng.below(7) {
            0 => "/dev/null".into(),
            1 => "/dev/zero".into(),
            2 => "/dev/nonexistent".into(),
            3 => "/dev/../dev/null".into(),
            4 => "/etc/hostname".into(),
            _ => path(rng, world),
        },
        permissions: match rng.below(5) {
            0 => "rwm".into(),
            1 => String::new(),
            2 => "r".into(),
            _ => string(rng, world),
        },
    }
}

// The deprecated profile fields are still part of the API berthd serves.
#[allow(deprecated)]
fn container_security(rng: &mut Rng, world: &mut World) -> LinuxContainerSecurityContext {
    LinuxContainerSecurityContext {
        capabilities: maybe(rng, 2, |rng| {
            let caps = |rng: &mut Rng, world: &mut World| -> Vec<String> {
                (0..rng.below(3))
                    .map(|_| match rng.below(5) {
                        0 => "ALL".into(),
                        1 => "CAP_NET_ADMIN".into(),
                        2 => "chown".into(),
                        3 => "CAP_NOPE".into(),
                        _ => string(rng, world),
                    })
                    .collect()
            };
            Capability {
                add_capabilities: caps(rng, world),
                drop_capabilities: caps(rng, world),
                add_ambient_capabilities: caps(rng, world),
            }
        }),
        privileged: rng.one_in(4),
        namespace_options: maybe(rng, 2, |rng| namespace_options(rng, world)),
        selinux_options: maybe(rng, 4, |rng| selinux(rng, world)),
        run_as_user: maybe(rng, 3, |rng| Int64Value { value: int64(rng) }),
        run_as_group: maybe(rng, 3, |rng| Int64Value { value: int64(rng) }),
        run_as_username: if rng.one_in(3) {
            string(rng, world)
        } else {
            String::new()
        },
        readonly_rootfs: rng.one_in(2),
        supplemental_groups: (0..rng.below(3)).map(|_| int64(rng)).collect(),
        supplemental_groups_policy: enumeration(rng, 2),
        no_new_privs: rng.one_in(2),
        masked_paths: (0..rng.below(3))
            .map(|_| container_path(rng, world))
            .collect(),
        readonly_paths: (0..rng.below(3))
            .map(|_| container_path(rng, world))
            .collect(),
        seccomp: maybe(rng, 3, |rng| security_profile(rng, world)),
        apparmor: maybe(rng, 3, |rng| security_profile(rng, world)),
        apparmor_profile: if rng.one_in(5) {
            string(rng, world)
        } else {
            String::new()
        },
        seccomp_profile_path: if rng.one_in(5) {
            path(rng, world)
        } else {
            String::new()
        },
    }
}
