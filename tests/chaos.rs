//! berthd killed with SIGKILL at random moments while four clients churn
//! pod lifecycles, each step retried while berthd is down, as kubelet
//! does. Nothing a client was told exists may be lost, and once every pod
//! is removed nothing may be left: mounts, pins, infra processes, shims,
//! container processes, veths, IP leases, cgroups, directories.
//!
//! A second run does the same through a CNI plugin that fails DELs (and
//! some ADDs), so that each teardown path meets a failing DEL.
//!
//! `BERTH_CHAOS_LIFECYCLES` (default 160), `BERTH_CHAOS_FLAKY_LIFECYCLES`
//! (default 40) and `BERTH_CHAOS_SEED` change the runs; the seed is printed.

use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_tests::host::{cgroup_hierarchies, cgroup_subtree, mounts_under, pids_rooted_under};
use berth_tests::pods::{container_config, pid, pod_config, Harness};
use cri_api::v1::runtime_service_client::RuntimeServiceClient;
use cri_api::v1::*;
use nix::sys::signal::Signal;
use tonic::{Code, Status};

const CLIENTS: usize = 4;
/// How long one step may keep failing for berthd being down.
const STEP_LIMIT: Duration = Duration::from_secs(180);

/// A small PRNG (xorshift64*): the run is reproducible from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn millis(&mut self, low: u64, high: u64) -> Duration {
        Duration::from_millis(low + self.next() % (high - low + 1))
    }
}

/// What the clients saw.
#[derive(Default)]
struct Tally {
    /// NotFound for a pod or container the client had been given.
    lost: AtomicUsize,
    lifecycles: AtomicUsize,
}

/// How many times berthd was killed so far: counted before each kill.
static KILLS: AtomicUsize = AtomicUsize::new(0);

/// Whether a failure is berthd being down (or dying mid-call): retry.
fn berthd_down(status: &Status) -> bool {
    matches!(status.code(), Code::Unavailable | Code::Cancelled)
        || (status.code() == Code::Unknown && status.message().contains("transport"))
}

/// Whether an answer's headers came and then the connection broke: berthd
/// died between them. A retry only if the test killed berthd meanwhile; a
/// connection berthd broke by itself fails the test.
fn cut_mid_answer(status: &Status) -> bool {
    status.code() == Code::Unknown && status.message().starts_with("h2 protocol error")
}

/// Answers a kill cut between their headers and their body.
static CUT_ANSWERS: AtomicUsize = AtomicUsize::new(0);

/// One call, retried while berthd is down; a fresh connection each time.
async fn retry<T, F, Fut>(socket: &Path, what: &str, call: F) -> Result<T, Status>
where
    F: Fn(RuntimeServiceClient<tonic::transport::Channel>) -> Fut,
    Fut: std::future::Future<Output = Result<T, Status>>,
{
    let deadline = Instant::now() + STEP_LIMIT;
    loop {
        let kills_before = KILLS.load(Ordering::SeqCst);
        let attempt = async {
            let channel = tonic::transport::Endpoint::try_from("http://[::]:50051")
                .map_err(|err| Status::internal(err.to_string()))?
                .connect_with_connector(tower::service_fn({
                    let socket = socket.to_path_buf();
                    move |_: tonic::transport::Uri| {
                        let socket = socket.clone();
                        async move {
                            let stream = tokio::net::UnixStream::connect(socket).await?;
                            Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
                        }
                    }
                }))
                .await
                .map_err(|err| Status::unavailable(err.to_string()))?;
            call(RuntimeServiceClient::new(channel)).await
        };
        match tokio::time::timeout(Duration::from_secs(60), attempt).await {
            Ok(Err(status)) if berthd_down(&status) => {}
            Ok(Err(status))
                if KILLS.load(Ordering::SeqCst) != kills_before && cut_mid_answer(&status) =>
            {
                CUT_ANSWERS.fetch_add(1, Ordering::SeqCst);
            }
            Ok(result) => return result,
            Err(_) => panic!("{what}: no answer within 60 s"),
        }
        assert!(
            Instant::now() < deadline,
            "{what}: berthd down for {STEP_LIMIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Steps that failed for the flaky plugin, then were tried again.
static FAILED_STEPS: AtomicUsize = AtomicUsize::new(0);

/// How often a failing step is tried again (kubelet: forever).
const FAILURE_RETRIES: usize = 10;

/// Whether a step failed for the flaky plugin (its message reaches the
/// client), not for anything else.
fn failed_step(status: &Status) -> bool {
    status.code() == Code::Internal && status.message().contains(FLAKY_MESSAGE)
}

/// A step retried up to `times` after it failed for the flaky plugin.
async fn retry_failures<T, F, Fut>(times: usize, step: F) -> Result<T, Status>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T, Status>>,
{
    let mut failures = 0;
    loop {
        match step().await {
            Err(status) if failures < times && failed_step(&status) => {
                failures += 1;
                FAILED_STEPS.fetch_add(1, Ordering::SeqCst);
            }
            result => return result,
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The id of the object a create made whose answer was lost: found by the
/// label every object of the run carries.
async fn create_or_find(
    socket: &Path,
    name: &str,
    failures_retried: bool,
    create: impl Fn(
        RuntimeServiceClient<tonic::transport::Channel>,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<String, Status>> + Send>,
    >,
    find: impl Fn(
        RuntimeServiceClient<tonic::transport::Channel>,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Option<String>, Status>> + Send>,
    >,
) -> String {
    loop {
        match retry(socket, name, &create).await {
            Ok(id) => return id,
            // An earlier attempt made it and was recorded; its answer died
            // with berthd.
            Err(status) if status.code() == Code::AlreadyExists => {
                if let Some(id) = retry(socket, name, &find).await.expect("list") {
                    return id;
                }
            }
            // A create that failed (the flaky plugin's ADD): kubelet tries
            // again, with the same name, which the failed run released.
            Err(status) if failures_retried && failed_step(&status) => {
                FAILED_STEPS.fetch_add(1, Ordering::SeqCst);
            }
            Err(status) => panic!("{name}: {status:?}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One pod's whole life: run, create, start, stop and remove the
/// container, stop and remove the pod. With a flaky network, a step that
/// fails (a CNI ADD or DEL) is retried, as kubelet does, and every other
/// pod skips StopPodSandbox, so that RemovePodSandbox meets the failing DEL.
async fn lifecycle(
    socket: PathBuf,
    image: String,
    parent: String,
    logs: PathBuf,
    name: String,
    tally: Arc<Tally>,
    flaky: bool,
) {
    let mut config = pod_config(&name, &parent, &logs, NamespaceMode::Pod);
    config.labels = HashMap::from([("chaos".to_string(), name.clone())]);
    let pod_id = {
        let config = config.clone();
        let name = name.clone();
        create_or_find(
            &socket,
            &format!("RunPodSandbox {name}"),
            flaky,
            move |mut client| {
                let config = config.clone();
                Box::pin(async move {
                    client
                        .run_pod_sandbox(RunPodSandboxRequest {
                            config: Some(config),
                            runtime_handler: String::new(),
                        })
                        .await
                        .map(|r| r.into_inner().pod_sandbox_id)
                })
            },
            move |mut client| {
                let name = name.clone();
                Box::pin(async move {
                    let filter = PodSandboxFilter {
                        label_selector: HashMap::from([("chaos".to_string(), name)]),
                        ..Default::default()
                    };
                    let items = client
                        .list_pod_sandbox(ListPodSandboxRequest {
                            filter: Some(filter),
                        })
                        .await?
                        .into_inner()
                        .items;
                    Ok(items.first().map(|pod| pod.id.clone()))
                })
            },
        )
        .await
    };
    let lost = |status: &Status| {
        if status.code() == Code::NotFound {
            tally.lost.fetch_add(1, Ordering::SeqCst);
            eprintln!("chaos: LOST {name}: {status:?}");
        }
    };
    let mut container = container_config("app", &image, &["sleep", &sleep_marker()]);
    container.labels = HashMap::from([("chaos".to_string(), name.clone())]);
    let container_id = {
        let (pod_id, config, container) = (pod_id.clone(), config.clone(), container.clone());
        let (pod_for_find, name_for_find) = (pod_id.clone(), name.clone());
        let create = move |mut client: RuntimeServiceClient<_>| {
            let request = CreateContainerRequest {
                pod_sandbox_id: pod_id.clone(),
                config: Some(container.clone()),
                sandbox_config: Some(config.clone()),
            };
            Box::pin(async move {
                client
                    .create_container(request)
                    .await
                    .map(|r| r.into_inner().container_id)
            }) as std::pin::Pin<Box<dyn std::future::Future<Output = _> + Send>>
        };
        let find = move |mut client: RuntimeServiceClient<_>| {
            let filter = ContainerFilter {
                pod_sandbox_id: pod_for_find.clone(),
                label_selector: HashMap::from([("chaos".to_string(), name_for_find.clone())]),
                ..Default::default()
            };
            Box::pin(async move {
                let items = client
                    .list_containers(ListContainersRequest {
                        filter: Some(filter),
                    })
                    .await?
                    .into_inner()
                    .containers;
                Ok(items.first().map(|c| c.id.clone()))
            }) as std::pin::Pin<Box<dyn std::future::Future<Output = _> + Send>>
        };
        match tokio::spawn({
            let socket = socket.clone();
            let name = format!("CreateContainer {name}");
            async move { create_or_find(&socket, &name, false, create, find).await }
        })
        .await
        {
            Ok(id) => id,
            Err(err) => panic!("{err}"),
        }
    };
    let id = container_id.clone();
    let started = retry(&socket, "StartContainer", |mut client| {
        let id = id.clone();
        async move {
            client
                .start_container(StartContainerRequest { container_id: id })
                .await
        }
    })
    .await;
    if let Err(start_error) = started {
        let status = start_error;
        lost(&status);
        // A retried start whose first attempt ran: the container runs.
        let state = retry(&socket, "ContainerStatus", |mut client| {
            let id = id.clone();
            async move {
                client
                    .container_status(ContainerStatusRequest {
                        container_id: id,
                        verbose: false,
                    })
                    .await
            }
        })
        .await;
        match state {
            Ok(status) => assert_ne!(
                status.into_inner().status.map(|s| s.state()),
                Some(ContainerState::ContainerCreated),
                "{name}: start failed and the container was never started"
            ),
            Err(status) => lost(&status),
        }
    }
    let skip_pod_stop = flaky && name.ends_with(['1', '3', '5', '7', '9']);
    for (what, step) in [
        ("StopContainer", 0),
        ("RemoveContainer", 1),
        ("StopPodSandbox", 2),
        ("RemovePodSandbox", 3),
    ] {
        if step == 2 && skip_pod_stop {
            continue;
        }
        let (container_id, pod_id) = (container_id.clone(), pod_id.clone());
        let retried = if flaky && step >= 2 {
            FAILURE_RETRIES
        } else {
            0
        };
        let result = retry_failures(retried, || {
            retry(&socket, what, |mut client| {
                let (container_id, pod_id) = (container_id.clone(), pod_id.clone());
                async move {
                    match step {
                        0 => client
                            .stop_container(StopContainerRequest {
                                container_id,
                                timeout: 1,
                            })
                            .await
                            .map(drop),
                        1 => client
                            .remove_container(RemoveContainerRequest { container_id })
                            .await
                            .map(drop),
                        2 => client
                            .stop_pod_sandbox(StopPodSandboxRequest {
                                pod_sandbox_id: pod_id,
                            })
                            .await
                            .map(drop),
                        _ => client
                            .remove_pod_sandbox(RemovePodSandboxRequest {
                                pod_sandbox_id: pod_id,
                            })
                            .await
                            .map(drop),
                    }
                }
            })
        })
        .await;
        if let Err(status) = result {
            lost(&status);
            panic!("{name}: {what}: {status:?}");
        }
    }
    tally.lifecycles.fetch_add(1, Ordering::SeqCst);
}

/// The argument of every container's `sleep`: names this test's processes.
fn sleep_marker() -> String {
    format!("7{}", pid())
}

/// What is left after every pod was removed, by kind.
fn leftovers(harness: &Harness) -> Vec<(&'static str, usize)> {
    let dir = harness.berthd.sandbox.dir.path().to_path_buf();
    let state = harness.berthd.sandbox.state();
    let root = harness.berthd.sandbox.root();
    let ns = state.join("ns");
    let processes = |binary: &str, needle: &str| {
        let mut count = 0;
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
                continue;
            };
            let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if text.contains(binary) && text.contains(needle) {
                count += 1;
            }
        }
        count
    };
    let dir_text = dir.display().to_string();
    let veths = std::process::Command::new("ip")
        .args(["-o", "link", "show", "master", &harness.bridge])
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).lines().count())
        .unwrap_or(0);
    let leases = std::fs::read_dir(harness.ipam_dir().join(&harness.net_name))
        .map(|entries| {
            entries
                .flatten()
                .filter(|entry| {
                    entry
                        .file_name()
                        .to_string_lossy()
                        .parse::<std::net::IpAddr>()
                        .is_ok()
                })
                .count()
        })
        .unwrap_or(0);
    let cgroup_dirs: Vec<PathBuf> = cgroup_hierarchies()
        .iter()
        .flat_map(|hierarchy| {
            let top = hierarchy.join(harness.cgroup_root.trim_start_matches('/'));
            cgroup_subtree(&top).into_iter().filter(move |d| *d != top)
        })
        .collect();
    for dir in &cgroup_dirs {
        eprintln!("chaos: cgroup left: {}", dir.display());
    }
    // What berthd did with each leaked object (the log's tail rarely has it).
    let log = harness.berthd.log_text();
    let mut named: Vec<String> = cgroup_dirs
        .iter()
        .filter_map(|dir| dir.file_name())
        .map(|name| name.to_string_lossy().into_owned())
        .filter(|name| name.len() == 64)
        .collect();
    named.sort();
    named.dedup();
    for id in &named {
        for line in log.lines().filter(|line| line.contains(id.as_str())) {
            eprintln!("chaos: log of {}: {line}", &id[..12]);
        }
    }
    let cgroups = cgroup_dirs.len();
    let dirs: usize = [
        state.join("sandboxes"),
        state.join("containers"),
        state.join("shims"),
        state.join("runtime"),
        ns.clone(),
        root.join("containers"),
        root.join("pods"),
    ]
    .iter()
    .map(|d| {
        std::fs::read_dir(d)
            .map(|entries| {
                entries
                    .flatten()
                    .filter(|e| e.file_name() != "trash")
                    .count()
            })
            .unwrap_or(0)
    })
    .sum();
    vec![
        ("mounts", mounts_under(&dir).len()),
        ("pins", mounts_under(&ns).len()),
        (
            "infra processes",
            processes("berth-pinns", &dir_text) + pids_rooted_under(&state.join("sandboxes")).len(),
        ),
        ("shims", processes("berth-shim", &dir_text)),
        ("container processes", processes("sleep", &sleep_marker())),
        ("veths", veths),
        ("IP leases", leases),
        ("cgroups", cgroups),
        ("directories", dirs),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nothing_is_lost_or_leaked_when_berthd_is_killed_at_random() {
    let lifecycles = env_number("BERTH_CHAOS_LIFECYCLES", 160);
    chaos(lifecycles as usize, None).await;
}

/// As above, with a CNI plugin that fails: every pod's first DELs
/// ([`FLAKY_DELS`]), so that a run's undo, StopPodSandbox, RemovePodSandbox
/// and start-up recovery meet them, and the first ADD of some pods after
/// the bridge made their IP and veth, so that the run is undone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nothing_is_leaked_when_cni_del_fails_and_berthd_is_killed() {
    let lifecycles = env_number("BERTH_CHAOS_FLAKY_LIFECYCLES", 40);
    chaos(lifecycles as usize, Some(FLAKY_DELS)).await;
}

/// The two chaos runs take turns: they count this binary's processes.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(default)
}

/// How many DELs of each pod the flaky plugin fails.
const FLAKY_DELS: u32 = 2;

/// What the flaky plugin's errors say, for the clients to tell them apart.
const FLAKY_MESSAGE: &str = "chaos-flaky plugin";

/// The flaky plugin: a wrapper of the bridge plugin (found in `CNI_PATH`
/// after its own dir) that fails the first `@FAILS@` DELs of each sandbox
/// (counted in a file named by the container id, so a berthd killed
/// meanwhile does not reset it) and, once per pod, an ADD of a pod whose
/// name ends in 1 or 6 after the bridge made it.
const FLAKY_PLUGIN: &str = r#"#!/bin/bash
set -euo pipefail
state=@STATE@
self=$(dirname "$(readlink -f "$0")")
fail() {
    cat >/dev/null
    printf '{"cniVersion":"1.0.0","code":999,"msg":"@MESSAGE@: %s"}\n' "$1"
    exit 1
}
# Counts a call: prints how many came before it.
count() {
    local file="$state/$1" n=0
    if [ -f "$file" ]; then n=$(cat "$file"); fi
    echo $((n + 1)) >"$file"
    echo "$n"
}
bridge=
IFS=: read -ra dirs <<<"${CNI_PATH:-}"
for dir in "${dirs[@]}"; do
    if [ "$(readlink -f "$dir")" != "$self" ] && [ -x "$dir/bridge" ]; then
        bridge="$dir/bridge"
        break
    fi
done
[ -n "$bridge" ] || fail "no bridge plugin in CNI_PATH"
case "${CNI_COMMAND:-}" in
DEL)
    if [ "$(count "del-$CNI_CONTAINERID")" -lt @FAILS@ ]; then
        fail "DEL of $CNI_CONTAINERID"
    fi
    ;;
ADD)
    pod=$(sed -n 's/.*K8S_POD_NAME=\([^;]*\).*/\1/p' <<<"${CNI_ARGS:-}")
    if [[ $pod == *[16] ]] && [ "$(count "add-$pod")" -eq 0 ]; then
        "$bridge" >/dev/null
        fail "ADD of $pod after the bridge made it"
    fi
    ;;
esac
exec "$bridge"
"#;

/// Puts the flaky plugin in place of the bridge: its dir goes first in
/// berthd's plugin dirs (berthd restarted to read them), and the network's
/// first plugin becomes it.
fn install_flaky_plugin(harness: &mut Harness, fails: u32) {
    let dir = harness.berthd.sandbox.dir.path().to_path_buf();
    let (bin, state) = (dir.join("cni-bin"), dir.join("cni-flaky"));
    std::fs::create_dir_all(&bin).expect("plugin dir");
    std::fs::create_dir_all(&state).expect("plugin state dir");
    let script = FLAKY_PLUGIN
        .replace("@STATE@", &state.display().to_string())
        .replace("@MESSAGE@", FLAKY_MESSAGE)
        .replace("@FAILS@", &fails.to_string());
    let plugin = bin.join("chaos-flaky");
    std::fs::write(&plugin, script).expect("plugin");
    std::fs::set_permissions(&plugin, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("plugin mode");
    let config = harness.berthd.sandbox.config_path();
    let text = std::fs::read_to_string(&config).expect("config");
    let text = text.replacen(
        "[cni]\n",
        &format!(
            "[cni]\nbin_dirs = [\"{}\", \"/opt/cni/bin\", \"/usr/lib/cni\"]\n",
            bin.display()
        ),
        1,
    );
    std::fs::write(&config, text).expect("config");
    harness
        .berthd
        .restart_on_same_dirs(Signal::SIGTERM, Duration::ZERO);
    let conflist = harness
        .berthd
        .sandbox
        .cni_conf_dir()
        .join("10-berth-it.conflist");
    let mut network: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&conflist).expect("conflist")).expect("json");
    network["plugins"][0]["type"] = "chaos-flaky".into();
    let tmp = conflist.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_vec(&network).expect("json")).expect("conflist");
    std::fs::rename(&tmp, &conflist).expect("conflist rename");
}

/// `lifecycles` pod lifecycles from [`CLIENTS`] clients while berthd is
/// killed at random; with `flaky`, through the flaky plugin failing that
/// many DELs of each pod.
async fn chaos(lifecycles: usize, flaky: Option<u32>) {
    let _turn = ONE_AT_A_TIME.lock().await;
    KILLS.store(0, Ordering::SeqCst);
    CUT_ANSWERS.store(0, Ordering::SeqCst);
    FAILED_STEPS.store(0, Ordering::SeqCst);
    let seed: u64 = std::env::var("BERTH_CHAOS_SEED")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64 | 1)
                .unwrap_or(1)
        });
    eprintln!(
        "chaos: seed {seed}, {lifecycles} lifecycles from {CLIENTS} clients, flaky DELs: {flaky:?}"
    );
    let mut rng = Rng(seed);
    let mut harness = Harness::start().await;
    if let Some(fails) = flaky {
        install_flaky_plugin(&mut harness, fails);
    }
    let socket = harness.berthd.sandbox.socket();
    let tally = Arc::new(Tally::default());
    let mut clients = Vec::new();
    for client in 0..CLIENTS {
        let (socket, image, tally) = (socket.clone(), harness.image.clone(), tally.clone());
        let parents: Vec<(String, PathBuf)> = (0..lifecycles / CLIENTS)
            .map(|n| {
                let name = format!("chaos-{client}-{n}");
                (harness.parent(&name), harness.log_dir(&name))
            })
            .collect();
        clients.push(tokio::spawn(async move {
            for (n, (parent, logs)) in parents.into_iter().enumerate() {
                let name = format!("chaos-{client}-{n}");
                lifecycle(
                    socket.clone(),
                    image.clone(),
                    parent,
                    logs,
                    name,
                    tally.clone(),
                    flaky.is_some(),
                )
                .await;
            }
        }));
    }
    while !clients.iter().all(|client| client.is_finished()) {
        tokio::time::sleep(rng.millis(200, 1500)).await;
        if clients.iter().all(|client| client.is_finished()) {
            break;
        }
        KILLS.fetch_add(1, Ordering::SeqCst);
        let status = tokio::task::block_in_place(|| {
            harness
                .berthd
                .restart_on_same_dirs(Signal::SIGKILL, Duration::ZERO)
        });
        // berthd died of this kill, not on its own before it.
        assert_eq!(
            status.signal(),
            Some(Signal::SIGKILL as i32),
            "berthd exited by itself ({status}); berthd log:\n{}",
            berth_tests::host::log_tail(&harness.berthd)
        );
    }
    for client in clients {
        if let Err(err) = client.await {
            panic!(
                "a client failed: {err}\nberthd log:\n{}",
                berth_tests::host::log_tail(&harness.berthd)
            );
        }
    }
    // Whatever is still listed goes, as an operator would remove it.
    let mut client = harness.berthd.runtime_client().await;
    let pods = client
        .list_pod_sandbox(ListPodSandboxRequest::default())
        .await
        .expect("list")
        .into_inner()
        .items;
    for pod in &pods {
        client
            .remove_pod_sandbox(RemovePodSandboxRequest {
                pod_sandbox_id: pod.id.clone(),
            })
            .await
            .expect("remove");
    }
    // Runs whose undo failed have no record to list or remove: any
    // RemovePodSandbox finishes them (here of an id no pod has, which is
    // success), as kubelet's next one for any pod does.
    if let Some(fails) = flaky {
        for _ in 0..=fails {
            client
                .remove_pod_sandbox(RemovePodSandboxRequest {
                    pod_sandbox_id: "no-such-pod".to_string(),
                })
                .await
                .expect("remove");
        }
    }
    // Trash is purged in the background; the rest must be gone at once.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let left = leftovers(&harness);
    let lost = tally.lost.load(Ordering::SeqCst);
    let kills = KILLS.load(Ordering::SeqCst);
    eprintln!(
        "chaos: {} lifecycles, {kills} kills ({} answers cut mid-way), {} steps failed by the plugin, {} pods still listed at the end, {lost} lost",
        tally.lifecycles.load(Ordering::SeqCst),
        CUT_ANSWERS.load(Ordering::SeqCst),
        FAILED_STEPS.load(Ordering::SeqCst),
        pods.len()
    );
    for (kind, count) in &left {
        eprintln!("chaos: leaked {kind}: {count}");
    }
    assert_eq!(lost, 0, "objects lost (seed {seed})");
    assert!(
        left.iter().all(|(_, count)| *count == 0),
        "leaked after {kills} kills (seed {seed}): {left:?}\nberthd log:\n{}",
        berth_tests::host::log_tail(&harness.berthd)
    );
    assert_eq!(
        tally.lifecycles.load(Ordering::SeqCst),
        lifecycles / CLIENTS * CLIENTS
    );
}
