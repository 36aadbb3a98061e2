//! A request fuzzer for the whole CRI surface against a live berthd: a
//! few thousand generated requests (`support/cri_fuzz.rs`) for every RPC
//! of both services, mixing real pod, container and image ids with junk.
//!
//! It fails when berthd panics, stops answering (a request outlives its
//! deadline, the process is gone, or `Version` gets no answer), or answers
//! an error with `Unknown`, or with `Internal` where the input was at
//! fault. At the end every pod is removed and nothing may be left: no
//! pods or containers listed, no shims, no pod or container cgroups, no
//! mounts under berthd's dirs, nothing a path escape would have made.
//!
//! `BERTH_FUZZ_SEED` generates a run's requests again (the seed is printed
//! at the start and with every failure; the ids berthd makes still differ); `BERTH_FUZZ_ITERATIONS` changes how many requests
//! are sent (default 3000).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use berth_tests::cri_fuzz::{self, Call, Rng, World, RPCS, RPC_NAMES};
use berth_tests::host::{cgroup_subtree, log_tail, mounts_under};
use berth_tests::pods::{pids_mentioning, Harness};
use cri_api::v1::image_service_client::ImageServiceClient;
use cri_api::v1::runtime_service_client::RuntimeServiceClient;
use cri_api::v1::*;
use tonic::transport::Channel;
use tonic::{Code, Status};

/// How long one request may take before berthd counts as hung. Generous:
/// a create or a pod run on a busy 2-core machine takes seconds.
const DEADLINE: Duration = Duration::from_secs(30);
/// Requests between liveness checks and pool refreshes.
const CHECK_EVERY: usize = 100;
/// Above this many pods (or containers) the fuzzer removes some, so the
/// node's /24 and the machine's memory last the whole run.
const MAX_PODS: usize = 8;
const MAX_CONTAINERS: usize = 24;

struct Clients {
    runtime: RuntimeServiceClient<Channel>,
    images: ImageServiceClient<Channel>,
}

/// What a request got back, reduced to what the oracle looks at.
enum Outcome {
    Ok,
    Err(Status),
    /// No answer within [`DEADLINE`].
    Hung,
}

#[tokio::test(flavor = "multi_thread")]
async fn generated_requests_never_panic_hang_or_answer_unknown() {
    let seed = std::env::var("BERTH_FUZZ_SEED")
        .ok()
        .and_then(|text| text.parse::<u64>().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|since| since.as_nanos() as u64)
                .unwrap_or(1)
        });
    let iterations = std::env::var("BERTH_FUZZ_ITERATIONS")
        .ok()
        .and_then(|text| text.parse::<usize>().ok())
        .unwrap_or(3000);
    eprintln!(
        "fuzz: seed {seed} (BERTH_FUZZ_SEED={seed} to generate it again), {iterations} requests"
    );

    let harness = Harness::start().await;
    let scratch = harness.berthd.sandbox.dir.path().join("fuzz");
    make_scratch(&scratch);
    let mut clients = Clients {
        runtime: harness.client().await,
        images: harness.berthd.image_client().await,
    };
    let image_id = stored_image(&mut clients, &harness.image)
        .await
        .expect("ImageStatus of the pulled image")
        .id;
    let mut world = World {
        pods: Vec::new(),
        pod_configs: Default::default(),
        containers: Vec::new(),
        image: harness.image.clone(),
        image_id,
        registry: harness.registry.host(),
        scratch: scratch.clone(),
        cgroup_root: harness.cgroup_root.clone(),
        counter: 0,
    };
    let mut rng = Rng::new(seed);
    let mut findings: BTreeMap<String, String> = BTreeMap::new();
    let mut per_rpc: BTreeMap<&'static str, BTreeMap<String, usize>> = BTreeMap::new();
    let started = Instant::now();
    // The request before, for failures that depend on what came first.
    let mut previous = String::from("none");

    for i in 0..iterations {
        if i % CHECK_EVERY == 0 {
            check_alive(&harness, &mut clients, seed, i).await;
            maintain(&harness, &mut clients, &mut world).await;
        }
        // Creates and pod runs reach the most code: sent more often.
        let which = match rng.below(10) {
            0 => 7,
            1 => 1,
            _ => rng.below(RPCS),
        };
        let rpc = RPC_NAMES[which];
        let call = cri_fuzz::generate(&mut rng, &mut world, which);
        let described = describe(&call);
        // The stored config of the pod a create goes into, for hangs.
        let target_pod = match &call {
            Call::CreateContainer(request) => world
                .pod_configs
                .get(&request.pod_sandbox_id)
                .map(|config| truncate(&format!("{config:?}"), 4000)),
            _ => None,
        };
        let run_config = match &call {
            Call::RunPodSandbox(request) => request.config.clone(),
            _ => None,
        };
        let outcome = send(&mut clients, call).await;
        let answer = match &outcome {
            Outcome::Ok => "Ok".to_string(),
            Outcome::Err(status) => format!("{:?}", status.code()),
            Outcome::Hung => "no answer".to_string(),
        };
        let counts = per_rpc.entry(rpc).or_default();
        match outcome {
            Outcome::Ok => {
                *counts.entry("Ok".into()).or_default() += 1;
            }
            Outcome::Err(status) => {
                *counts.entry(format!("{:?}", status.code())).or_default() += 1;
                if !acceptable(rpc, &status) {
                    let key = format!("{rpc} {:?} {}", status.code(), first_words(&status));
                    findings.entry(key).or_insert_with(|| {
                        format!(
                            "seed {seed} request #{i} {rpc}: {:?} {:?}\n  request: {described}\n  after: {previous}",
                            status.code(),
                            truncate(status.message(), 600),
                        )
                    });
                }
            }
            Outcome::Hung => {
                panic!(
                    "seed {seed} request #{i} {rpc}: no answer within {DEADLINE:?} (berthd hung)\n  request: {described}\n  its pod was run with: {}\nberthd log:\n{}",
                    target_pod.unwrap_or_default(),
                    log_tail(&harness.berthd)
                );
            }
        }
        previous = format!("{} → {answer}", truncate(&described, 300));
        if let Some(config) = run_config {
            // A pod that ran joins the pool with its config.
            refresh_pools(&mut clients, &mut world).await;
            for pod in &world.pods {
                world
                    .pod_configs
                    .entry(pod.clone())
                    .or_insert_with(|| config.clone());
            }
        }
    }
    check_alive(&harness, &mut clients, seed, iterations).await;
    eprintln!("fuzz: {iterations} requests in {:.1?}", started.elapsed());
    for (rpc, codes) in &per_rpc {
        eprintln!("fuzz:   {rpc}: {codes:?}");
    }
    if iterations >= 1000 {
        assert_eq!(per_rpc.len(), RPCS, "every RPC was exercised: {per_rpc:?}");
    }

    remove_everything(&mut clients).await;
    check_nothing_left(&harness, &mut clients, &scratch).await;
    check_alive(&harness, &mut clients, seed, iterations).await;

    assert!(
        findings.is_empty(),
        "seed {seed}: {} kinds of wrong answers:\n{}",
        findings.len(),
        findings.into_values().collect::<Vec<_>>().join("\n")
    );
}

/// The oracle for one error: never `Unknown`; `Internal` only where the
/// fault is the host's and not the request's, which no generated request
/// is meant to provoke; never `Cancelled`, as the fuzzer cancels nothing
/// (a reset stream means berthd dropped the call).
fn acceptable(_rpc: &str, status: &Status) -> bool {
    !matches!(
        status.code(),
        Code::Unknown | Code::Internal | Code::Cancelled
    )
}

/// The first words of a message with digits and quoted parts blurred, so
/// one kind of failure is reported once, not once per id.
fn first_words(status: &Status) -> String {
    let blurred: String = status
        .message()
        .chars()
        .map(|c| if c.is_ascii_digit() { '#' } else { c })
        .collect();
    blurred
        .split_whitespace()
        .take(5)
        .collect::<Vec<_>>()
        .join(" ")
}

fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &text[..end], text.len())
}

fn describe(call: &Call) -> String {
    truncate(&format!("{call:?}"), 2000)
}

/// Sends `call` with a deadline; streams are drained (the event stream,
/// which never ends, is read briefly and dropped).
async fn send(clients: &mut Clients, call: Call) -> Outcome {
    let runtime = &mut clients.runtime;
    let images = &mut clients.images;
    macro_rules! unary {
        ($client:expr, $method:ident, $request:expr) => {
            $client.$method($request).await.map(|_| ())
        };
    }
    macro_rules! stream {
        ($client:expr, $method:ident, $request:expr) => {
            async {
                let mut stream = $client.$method($request).await?.into_inner();
                while stream.message().await?.is_some() {}
                Ok::<(), Status>(())
            }
            .await
        };
    }
    let work = async move {
        match call {
            Call::Version(r) => unary!(runtime, version, r),
            Call::RunPodSandbox(r) => unary!(runtime, run_pod_sandbox, r),
            Call::StopPodSandbox(r) => unary!(runtime, stop_pod_sandbox, r),
            Call::RemovePodSandbox(r) => unary!(runtime, remove_pod_sandbox, r),
            Call::PodSandboxStatus(r) => unary!(runtime, pod_sandbox_status, r),
            Call::ListPodSandbox(r) => unary!(runtime, list_pod_sandbox, r),
            Call::StreamPodSandboxes(r) => stream!(runtime, stream_pod_sandboxes, r),
            Call::CreateContainer(r) => unary!(runtime, create_container, r),
            Call::StartContainer(r) => unary!(runtime, start_container, r),
            Call::StopContainer(r) => unary!(runtime, stop_container, r),
            Call::RemoveContainer(r) => unary!(runtime, remove_container, r),
            Call::ListContainers(r) => unary!(runtime, list_containers, r),
            Call::StreamContainers(r) => stream!(runtime, stream_containers, r),
            Call::ContainerStatus(r) => unary!(runtime, container_status, r),
            Call::UpdateContainerResources(r) => {
                unary!(runtime, update_container_resources, r)
            }
            Call::ReopenContainerLog(r) => unary!(runtime, reopen_container_log, r),
            Call::ExecSync(r) => unary!(runtime, exec_sync, r),
            Call::Exec(r) => unary!(runtime, exec, r),
            Call::Attach(r) => unary!(runtime, attach, r),
            Call::PortForward(r) => unary!(runtime, port_forward, r),
            Call::ContainerStats(r) => unary!(runtime, container_stats, r),
            Call::ListContainerStats(r) => unary!(runtime, list_container_stats, r),
            Call::StreamContainerStats(r) => stream!(runtime, stream_container_stats, r),
            Call::PodSandboxStats(r) => unary!(runtime, pod_sandbox_stats, r),
            Call::ListPodSandboxStats(r) => unary!(runtime, list_pod_sandbox_stats, r),
            Call::StreamPodSandboxStats(r) => stream!(runtime, stream_pod_sandbox_stats, r),
            Call::UpdateRuntimeConfig(r) => unary!(runtime, update_runtime_config, r),
            Call::Status(r) => unary!(runtime, status, r),
            Call::CheckpointContainer(r) => unary!(runtime, checkpoint_container, r),
            Call::GetContainerEvents(r) => {
                async {
                    let mut stream = runtime.get_container_events(r).await?.into_inner();
                    let _ = tokio::time::timeout(Duration::from_millis(50), stream.message()).await;
                    Ok::<(), Status>(())
                }
                .await
            }
            Call::ListMetricDescriptors(r) => unary!(runtime, list_metric_descriptors, r),
            Call::ListPodSandboxMetrics(r) => unary!(runtime, list_pod_sandbox_metrics, r),
            Call::StreamPodSandboxMetrics(r) => {
                stream!(runtime, stream_pod_sandbox_metrics, r)
            }
            Call::RuntimeConfig(r) => unary!(runtime, runtime_config, r),
            Call::UpdatePodSandboxResources(r) => {
                unary!(runtime, update_pod_sandbox_resources, r)
            }
            Call::ListImages(r) => unary!(images, list_images, r),
            Call::StreamImages(r) => stream!(images, stream_images, r),
            Call::ImageStatus(r) => unary!(images, image_status, r),
            Call::PullImage(r) => unary!(images, pull_image, r),
            Call::RemoveImage(r) => unary!(images, remove_image, r),
            Call::ImageFsInfo(r) => unary!(images, image_fs_info, r),
        }
    };
    match tokio::time::timeout(DEADLINE, work).await {
        Ok(Ok(())) => Outcome::Ok,
        Ok(Err(status)) => Outcome::Err(status),
        Err(_) => Outcome::Hung,
    }
}

/// berthd runs, answers `Version`, and has not panicked.
async fn check_alive(harness: &Harness, clients: &mut Clients, seed: u64, i: usize) {
    let pid = harness.berthd.pid();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .unwrap_or("gone");
    assert!(
        state != "Z" && state != "gone",
        "seed {seed} after request #{i}: berthd (pid {pid}) is {state}:\n{}",
        log_tail(&harness.berthd)
    );
    let answer = tokio::time::timeout(
        Duration::from_secs(10),
        clients.runtime.version(VersionRequest::default()),
    )
    .await;
    assert!(
        matches!(answer, Ok(Ok(_))),
        "seed {seed} after request #{i}: Version got {answer:?}:\n{}",
        log_tail(&harness.berthd)
    );
    let log = harness.berthd.log_text();
    if let Some(at) = log.find("panicked at") {
        let from = log[..at].rfind('\n').map_or(0, |n| n + 1);
        panic!(
            "seed {seed} by request #{i}: berthd panicked:\n{}",
            truncate(&log[from..], 3000)
        );
    }
}

/// Files and dirs the generators point paths at.
fn make_scratch(scratch: &Path) {
    std::fs::create_dir_all(scratch.join("dir")).expect("scratch dir");
    std::fs::create_dir_all(scratch.join("logs")).expect("scratch logs");
    std::fs::write(scratch.join("file"), b"fuzz\n").expect("scratch file");
    std::fs::write(scratch.join("not-json"), b"{ not json").expect("scratch not-json");
    std::fs::write(
        scratch.join("seccomp.json"),
        br#"{"defaultAction":"SCMP_ACT_ALLOW"}"#,
    )
    .expect("scratch seccomp");
    nix::unistd::mkfifo(
        &scratch.join("fifo"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .expect("scratch fifo");
}

/// The pools from what berthd lists.
async fn refresh_pools(clients: &mut Clients, world: &mut World) {
    if let Ok(pods) = clients
        .runtime
        .list_pod_sandbox(ListPodSandboxRequest::default())
        .await
    {
        world.pods = pods.into_inner().items.into_iter().map(|p| p.id).collect();
    }
    if let Ok(containers) = clients
        .runtime
        .list_containers(ListContainersRequest::default())
        .await
    {
        world.containers = containers
            .into_inner()
            .containers
            .into_iter()
            .map(|c| c.id)
            .collect();
    }
    world
        .pod_configs
        .retain(|id, _| world.pods.iter().any(|pod| pod == id));
}

/// The stored image `image` names, if berthd has it (any error is none).
async fn stored_image(clients: &mut Clients, image: &str) -> Option<cri_api::v1::Image> {
    clients
        .images
        .image_status(ImageStatusRequest {
            image: Some(ImageSpec {
                image: image.to_string(),
                ..Default::default()
            }),
            verbose: false,
        })
        .await
        .ok()?
        .into_inner()
        .image
}

/// Keeps the pools useful and bounded: a pod with a running container
/// and a created one, the image present, not too many pods or containers.
async fn maintain(harness: &Harness, clients: &mut Clients, world: &mut World) {
    refresh_pools(clients, world).await;
    while world.pods.len() > MAX_PODS {
        let victim = world.pods.remove(0);
        remove_pod(clients, &victim).await;
    }
    for victim in world.containers.iter().skip(MAX_CONTAINERS) {
        let _ = clients
            .runtime
            .remove_container(RemoveContainerRequest {
                container_id: victim.clone(),
            })
            .await;
    }
    if stored_image(clients, &world.image).await.is_none() {
        clients
            .images
            .pull_image(PullImageRequest {
                image: Some(ImageSpec {
                    image: world.image.clone(),
                    ..Default::default()
                }),
                auth: None,
                sandbox_config: None,
            })
            .await
            .expect("pull the image again");
    }
    // A running container in a pod of the fuzzer's own, unless the
    // fuzzing left one.
    let running = clients
        .runtime
        .list_containers(ListContainersRequest {
            filter: Some(ContainerFilter {
                state: Some(ContainerStateValue {
                    state: ContainerState::ContainerRunning as i32,
                }),
                ..Default::default()
            }),
        })
        .await
        .map(|answer| answer.into_inner().containers.len())
        .unwrap_or_default();
    if running == 0 {
        let n = world.counter + 1;
        world.counter = n;
        let name = format!("fixture-{n}");
        let config = berth_tests::pods::pod_config(
            &name,
            &harness.parent(&name),
            &world.scratch.join("logs").join(&name),
            NamespaceMode::Container,
        );
        let pod = harness
            .client()
            .await
            .run_pod_sandbox(RunPodSandboxRequest {
                config: Some(config.clone()),
                runtime_handler: String::new(),
            })
            .await
            .unwrap_or_else(|status| {
                panic!("fixture pod: {status:?}\n{}", log_tail(&harness.berthd))
            })
            .into_inner()
            .pod_sandbox_id;
        // Stops on SIGTERM within a second, so a StopContainer with any
        // timeout returns promptly.
        let looping = berth_tests::pods::container_config(
            "loop",
            &world.image,
            &[
                "/bin/sh",
                "-c",
                "trap 'exit 0' TERM; while true; do sleep 1; done",
            ],
        );
        let id = harness.create_ok(&pod, &config, looping).await;
        harness.start_container(&id).await;
        let created = berth_tests::pods::container_config("idle", &world.image, &["/bin/true"]);
        harness.create_ok(&pod, &config, created).await;
        world.pod_configs.insert(pod, config);
        refresh_pools(clients, world).await;
    }
}

async fn remove_pod(clients: &mut Clients, id: &str) {
    let _ = clients
        .runtime
        .stop_pod_sandbox(StopPodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        })
        .await;
    let _ = clients
        .runtime
        .remove_pod_sandbox(RemovePodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        })
        .await;
}

async fn remove_everything(clients: &mut Clients) {
    let pods = clients
        .runtime
        .list_pod_sandbox(ListPodSandboxRequest::default())
        .await
        .expect("ListPodSandbox")
        .into_inner()
        .items;
    for pod in pods {
        clients
            .runtime
            .stop_pod_sandbox(StopPodSandboxRequest {
                pod_sandbox_id: pod.id.clone(),
            })
            .await
            .unwrap_or_else(|status| panic!("StopPodSandbox {}: {status:?}", pod.id));
        clients
            .runtime
            .remove_pod_sandbox(RemovePodSandboxRequest {
                pod_sandbox_id: pod.id.clone(),
            })
            .await
            .unwrap_or_else(|status| panic!("RemovePodSandbox {}: {status:?}", pod.id));
    }
}

/// After every pod is removed: nothing listed, nothing mounted under
/// berthd's dirs, no file any escaping path would have made.
async fn check_nothing_left(harness: &Harness, clients: &mut Clients, scratch: &Path) {
    let pods = clients
        .runtime
        .list_pod_sandbox(ListPodSandboxRequest::default())
        .await
        .expect("ListPodSandbox")
        .into_inner()
        .items;
    assert!(pods.is_empty(), "pods left: {pods:?}");
    let containers = clients
        .runtime
        .list_containers(ListContainersRequest::default())
        .await
        .expect("ListContainers")
        .into_inner()
        .containers;
    assert!(containers.is_empty(), "containers left: {containers:?}");
    let sandbox = &harness.berthd.sandbox;
    for dir in [sandbox.root(), sandbox.state()] {
        let mounts = mounts_under(&dir);
        assert!(
            mounts.is_empty(),
            "mounts left under {}: {mounts:?}",
            dir.display()
        );
    }
    // Shims exit once their containers are removed.
    let dir = sandbox.dir.path().display().to_string();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !pids_mentioning(&dir).is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let shims = pids_mentioning(&dir);
    assert!(shims.is_empty(), "shims left running: {shims:?}");
    // No pod or container cgroup (named by its 64-hex id) is left.
    let root = harness.cgroup_root.trim_start_matches('/');
    for hierarchy in berth_tests::host::cgroup_hierarchies() {
        let left: Vec<_> = cgroup_subtree(&hierarchy.join(root))
            .into_iter()
            .filter(|cgroup| {
                cgroup.file_name().is_some_and(|name| {
                    let name = name.to_string_lossy();
                    name.len() == 64 && name.bytes().all(|b| b.is_ascii_hexdigit())
                })
            })
            .collect();
        assert!(left.is_empty(), "cgroups left: {left:?}");
    }
    let mut escaped = Vec::new();
    find_escapes(scratch, &mut escaped);
    for cgroup in berth_tests::host::cgroup_hierarchies() {
        let root = harness.cgroup_root.trim_start_matches('/');
        let outside = cgroup.join(format!("{root}-escape"));
        if outside.exists() {
            let _ = std::fs::remove_dir(&outside);
            escaped.push(outside);
        }
    }
    for relative in ["relative", "relative/path"] {
        let here = std::env::current_dir().expect("cwd").join(relative);
        if here.exists() {
            escaped.push(here);
        }
    }
    assert!(
        escaped.is_empty(),
        "paths outside where they belong were created: {escaped:?}"
    );
}

fn find_escapes(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if entry.file_name().to_string_lossy().contains("escape") {
            out.push(path.clone());
        }
        if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
            find_escapes(&path, out);
        }
    }
}
