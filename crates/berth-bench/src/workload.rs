//! Pods with one container each: lifecycles timed per RPC, pods started in
//! parallel and left running, and their removal.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cri_api::v1::{
    ContainerConfig, ContainerFilter, ContainerMetadata, ContainerState, ContainerStateValue,
    CreateContainerRequest, ImageSpec, LinuxContainerConfig, LinuxPodSandboxConfig,
    ListContainersRequest, ListPodSandboxRequest, PodSandboxConfig, PodSandboxFilter,
    PodSandboxMetadata, RemoveContainerRequest, RemovePodSandboxRequest, RunPodSandboxRequest,
    StartContainerRequest, StopContainerRequest, StopPodSandboxRequest,
};

use crate::client::Cri;
use crate::record::{ms, Out};

/// The label every bench pod and container carries; its value is the tag.
pub const LABEL: &str = "berth-bench";
/// Seconds StopContainer waits before SIGKILL (the command exits on SIGTERM).
const STOP_TIMEOUT: i64 = 10;

/// What the bench's pods look like.
#[derive(clap::Args, Clone)]
pub struct PodArgs {
    /// Container image (pulled beforehand).
    #[arg(long)]
    image: String,
    /// Label value of the pods, to find them again.
    #[arg(long, default_value = "bench")]
    tag: String,
    /// Parent of the pods' log directories.
    #[arg(long)]
    log_root: PathBuf,
    /// Cgroup (cgroupfs path) under which each pod gets a parent of its
    /// own, as kubelet gives every pod one (containerd's pod stats need
    /// it); without it, the runtime's default.
    #[arg(long)]
    cgroup_root: Option<String>,
}

/// The RPCs of one lifecycle, in order.
const STEPS: [&str; 7] = [
    "RunPodSandbox",
    "CreateContainer",
    "StartContainer",
    "StopContainer",
    "RemoveContainer",
    "StopPodSandbox",
    "RemovePodSandbox",
];

/// A pod name unique across runs: pods of an interrupted run may still exist.
fn unique(tag: &str, index: usize) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!("{tag}-{index}-{}-{nanos}", std::process::id())
}

pub fn labels(tag: &str) -> HashMap<String, String> {
    HashMap::from([(LABEL.to_string(), tag.to_string())])
}

fn pod_config(args: &PodArgs, index: usize) -> Result<PodSandboxConfig, String> {
    let name = unique(&args.tag, index);
    let log_dir = args.log_root.join(&name);
    // kubelet creates the log directory before RunPodSandbox; so do we.
    std::fs::create_dir_all(&log_dir).map_err(|err| format!("{}: {err}", log_dir.display()))?;
    Ok(PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: name.clone(),
            uid: format!("uid-{name}"),
            namespace: "berth-bench".to_string(),
            attempt: 0,
        }),
        hostname: format!("pod{index}"),
        log_directory: log_dir.display().to_string(),
        labels: labels(&args.tag),
        linux: Some(LinuxPodSandboxConfig {
            cgroup_parent: args
                .cgroup_root
                .as_ref()
                .map(|root| format!("{root}/pod-{name}"))
                .unwrap_or_default(),
            ..Default::default()
        }),
        ..Default::default()
    })
}

fn container_config(args: &PodArgs) -> ContainerConfig {
    ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: "work".to_string(),
            attempt: 0,
        }),
        image: Some(ImageSpec {
            image: args.image.clone(),
            ..Default::default()
        }),
        // Exits at once on SIGTERM, so StopContainer measures the stop path
        // and not the grace period.
        command: vec![
            "/bin/sh".to_string(),
            "-c".to_string(),
            "trap 'exit 0' TERM; sleep 3600 & wait".to_string(),
        ],
        log_path: "work.log".to_string(),
        labels: labels(&args.tag),
        linux: Some(LinuxContainerConfig::default()),
        ..Default::default()
    }
}

/// Runs a pod and starts its container. Returns the pod id.
async fn start_pod(
    cri: &Cri,
    args: &PodArgs,
    index: usize,
    times: &mut [Duration],
) -> Result<String, String> {
    let mut rt = cri.runtime.clone();
    let config = pod_config(args, index)?;
    let t = Instant::now();
    let pod = rt
        .run_pod_sandbox(RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        })
        .await
        .map_err(|s| format!("RunPodSandbox: {s}"))?
        .into_inner()
        .pod_sandbox_id;
    times[0] = t.elapsed();
    let t = Instant::now();
    let created = rt
        .create_container(CreateContainerRequest {
            pod_sandbox_id: pod.clone(),
            config: Some(container_config(args)),
            sandbox_config: Some(config),
        })
        .await;
    let container = match created {
        Ok(r) => r.into_inner().container_id,
        Err(s) => return Err(format!("CreateContainer in {pod}: {s}")),
    };
    times[1] = t.elapsed();
    let t = Instant::now();
    rt.start_container(StartContainerRequest {
        container_id: container.clone(),
    })
    .await
    .map_err(|s| format!("StartContainer {container}: {s}"))?;
    times[2] = t.elapsed();
    Ok(pod)
}

/// `n` full lifecycles in a row, each RPC timed.
pub async fn lifecycle(
    cri: &Cri,
    out: &Out,
    args: &PodArgs,
    n: usize,
    metric: &str,
) -> Result<(), String> {
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); STEPS.len()];
    let mut totals = Vec::new();
    let mut create_start = Vec::new();
    let mut rt = cri.runtime.clone();
    for i in 0..n {
        let mut times = [Duration::ZERO; STEPS.len()];
        let pod = start_pod(cri, args, i, &mut times).await?;
        let containers = rt
            .list_containers(ListContainersRequest {
                filter: Some(ContainerFilter {
                    pod_sandbox_id: pod.clone(),
                    ..Default::default()
                }),
            })
            .await
            .map_err(|s| format!("ListContainers: {s}"))?
            .into_inner()
            .containers;
        let container = containers
            .first()
            .map(|c| c.id.clone())
            .ok_or_else(|| format!("pod {pod} lists no container"))?;
        let t = Instant::now();
        rt.stop_container(StopContainerRequest {
            container_id: container.clone(),
            timeout: STOP_TIMEOUT,
        })
        .await
        .map_err(|s| format!("StopContainer: {s}"))?;
        times[3] = t.elapsed();
        let t = Instant::now();
        rt.remove_container(RemoveContainerRequest {
            container_id: container,
        })
        .await
        .map_err(|s| format!("RemoveContainer: {s}"))?;
        times[4] = t.elapsed();
        let t = Instant::now();
        rt.stop_pod_sandbox(StopPodSandboxRequest {
            pod_sandbox_id: pod.clone(),
        })
        .await
        .map_err(|s| format!("StopPodSandbox: {s}"))?;
        times[5] = t.elapsed();
        let t = Instant::now();
        rt.remove_pod_sandbox(RemovePodSandboxRequest {
            pod_sandbox_id: pod,
        })
        .await
        .map_err(|s| format!("RemovePodSandbox: {s}"))?;
        times[6] = t.elapsed();
        for (s, d) in samples.iter_mut().zip(times) {
            s.push(ms(d));
        }
        totals.push(times.iter().map(|d| ms(*d)).sum());
        create_start.push(ms(times[1] + times[2]));
    }
    for (step, s) in STEPS.iter().zip(&samples) {
        out.write(&format!("{metric}/{step}"), "ms", s)?;
    }
    // Where the container is made differs between runtimes (berth in
    // CreateContainer, runc-based ones in StartContainer); the sum compares.
    out.write(
        &format!("{metric}/CreateContainer+StartContainer"),
        "ms",
        &create_start,
    )?;
    out.write(&format!("{metric}/total"), "ms", &totals)
}

/// Starts `pods` pods, `clients` at a time; records the wall time until all
/// are running, the pod-start latency kubelet sees for each pod
/// (RunPodSandbox + CreateContainer + StartContainer, `pod start`) and the
/// error count.
pub async fn up(
    cri: &Cri,
    out: &Out,
    args: &PodArgs,
    pods: usize,
    clients: usize,
    metric: Option<&str>,
) -> Result<(), String> {
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..clients.max(1) {
        let (cri, args, next) = (cri.clone(), args.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut per_pod = Vec::new();
            let mut errors = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= pods {
                    break;
                }
                let mut times = [Duration::ZERO; STEPS.len()];
                let t = Instant::now();
                match start_pod(&cri, &args, i, &mut times).await {
                    Ok(_) => per_pod.push(ms(t.elapsed())),
                    Err(err) => errors.push(err),
                }
            }
            (per_pod, errors)
        }));
    }
    let mut per_pod = Vec::new();
    let mut errors = Vec::new();
    for task in tasks {
        let (p, e) = task.await.map_err(|err| err.to_string())?;
        per_pod.extend(p);
        errors.extend(e);
    }
    let wall = ms(start.elapsed());
    let running = running_containers(cri, &args.tag).await?;
    for err in &errors {
        eprintln!("berth-bench: {err}");
    }
    let missing = pods.saturating_sub(running);
    if missing > errors.len() {
        eprintln!("berth-bench: {running} of {pods} containers running");
    }
    if let Some(metric) = metric {
        out.write(&format!("{metric}/wall"), "ms", &[wall])?;
        out.write(&format!("{metric}/pod start"), "ms", &per_pod)?;
        out.write(
            &format!("{metric}/errors"),
            "count",
            &[errors.len().max(missing) as f64],
        )?;
    }
    Ok(())
}

async fn running_containers(cri: &Cri, tag: &str) -> Result<usize, String> {
    let mut rt = cri.runtime.clone();
    let list = rt
        .list_containers(ListContainersRequest {
            filter: Some(ContainerFilter {
                state: Some(ContainerStateValue {
                    state: ContainerState::ContainerRunning as i32,
                }),
                label_selector: labels(tag),
                ..Default::default()
            }),
        })
        .await
        .map_err(|s| format!("ListContainers: {s}"))?;
    Ok(list.into_inner().containers.len())
}

/// Stops and removes bench pods (and so their containers), `clients` at a
/// time, all but the `leave` oldest.
pub async fn down(
    cri: &Cri,
    tag: Option<&str>,
    clients: usize,
    leave: usize,
) -> Result<(), String> {
    let mut rt = cri.runtime.clone();
    let pods = rt
        .list_pod_sandbox(ListPodSandboxRequest {
            filter: Some(PodSandboxFilter::default()),
        })
        .await
        .map_err(|s| format!("ListPodSandbox: {s}"))?
        .into_inner()
        .items;
    let mut pods: Vec<_> = pods
        .into_iter()
        .filter(|p| match (p.labels.get(LABEL), tag) {
            (Some(v), Some(t)) => v == t,
            (Some(_), None) => true,
            (None, _) => false,
        })
        .collect();
    pods.sort_by_key(|p| p.created_at);
    let ids: Vec<String> = pods.into_iter().skip(leave).map(|p| p.id).collect();
    let ids = Arc::new(ids);
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..clients.max(1) {
        let (mut rt, ids, next) = (cri.runtime.clone(), ids.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut failed = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(id) = ids.get(i) else { break };
                let stopped = rt
                    .stop_pod_sandbox(StopPodSandboxRequest {
                        pod_sandbox_id: id.clone(),
                    })
                    .await;
                let removed = rt
                    .remove_pod_sandbox(RemovePodSandboxRequest {
                        pod_sandbox_id: id.clone(),
                    })
                    .await;
                if let Err(s) = stopped.and(removed) {
                    failed.push(format!("removing pod {id}: {s}"));
                }
            }
            failed
        }));
    }
    let mut failed = Vec::new();
    for task in tasks {
        failed.extend(task.await.map_err(|err| err.to_string())?);
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(failed.join("; "))
    }
}
