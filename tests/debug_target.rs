//! Containers that join an existing PID namespace, created after that
//! namespace has handed out many pids: a PID TARGET debug container on a
//! busy target and on a restarted one, and a container re-created in a pod
//! with a shared PID namespace. Such a container's pid inside the namespace
//! is then a number the host's own pids do not share, which is what broke
//! their creation on cgroup v1 hosts (see `berth_spec::cgroup_mounts`).
//!
//! Each test starts its own berthd, registry and CNI network, as in
//! `tests/containers.rs`.

use std::path::{Path, PathBuf};

use berth_tests::pods::{container_config, with_pid, Harness};
use cri_api::v1::{
    ContainerConfig, ContainerState, ContainerStatus, ExecSyncRequest, NamespaceMode,
    PodSandboxConfig,
};

/// How many short processes the busy container runs: enough to move the
/// namespace's next pid well past the few low pids every host has.
const PROCESSES: u32 = 1000;

/// A container that leaves `marker` in its `/tmp/marker` and sleeps.
fn sleeper(name: &str, image: &str, marker: &str) -> ContainerConfig {
    let script = format!("echo {marker} > /tmp/marker; exec /bin/sleep 1000");
    container_config(name, image, &["/bin/sh", "-c", &script])
}

/// A container that lists the processes it sees, then prints every
/// `/tmp/marker` it reads through `/proc/<pid>/root`, then what it sees of
/// `/sys/fs/cgroup`.
fn looker(name: &str, image: &str) -> ContainerConfig {
    let script = "/bin/ps -o pid,args; \
        for p in /proc/[0-9]*; do /bin/cat $p/root/tmp/marker 2>/dev/null; done; \
        [ -f /sys/fs/cgroup/memory/memory.limit_in_bytes ] && echo cgroup-memory-ok; \
        /bin/busybox mkdir /sys/fs/cgroup/x 2>/dev/null || echo cgroup-read-only";
    container_config(name, image, &["/bin/sh", "-c", script])
}

/// Runs [`PROCESSES`] `/bin/true`s in the container through ExecSync.
async fn run_many_processes(harness: &Harness, id: &str) {
    let script =
        format!("i=0; while [ $i -lt {PROCESSES} ]; do /bin/true; i=$((i+1)); done; echo done");
    let exec = harness
        .client()
        .await
        .exec_sync(ExecSyncRequest {
            container_id: id.to_string(),
            cmd: vec!["/bin/sh".into(), "-c".into(), script],
            timeout: 120,
        })
        .await
        .unwrap_or_else(|status| panic!("ExecSync in {id}: {status:?}"))
        .into_inner();
    assert_eq!(exec.exit_code, 0, "{exec:?}");
    assert_eq!(String::from_utf8_lossy(&exec.stdout).trim(), "done");
}

async fn start_running(
    harness: &Harness,
    pod: &str,
    pod_cfg: &PodSandboxConfig,
    config: ContainerConfig,
) -> String {
    let id = harness.run_container(pod, pod_cfg, config).await;
    id
}

/// Creates and starts `config`, waits for it to exit 0 and returns its
/// log's message lines.
async fn run_to_completion(
    harness: &Harness,
    pod: &str,
    pod_cfg: &PodSandboxConfig,
    config: ContainerConfig,
) -> Vec<String> {
    let id = harness.create_ok(pod, pod_cfg, config).await;
    harness.start_container(&id).await;
    let status = harness
        .wait_state(&id, ContainerState::ContainerExited)
        .await;
    assert_eq!(status.exit_code, 0, "{status:?}");
    log_lines(&log_file(pod_cfg, &status))
}

fn log_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| line.splitn(4, ' ').nth(3).unwrap_or_default().to_string())
        .collect()
}

fn log_file(pod_config: &PodSandboxConfig, status: &ContainerStatus) -> PathBuf {
    Path::new(&pod_config.log_directory).join(&status.log_path)
}

/// What every looker must show: the target's sleep, its marker read
/// through `/proc/<pid>/root`, its own memory cgroup, read-only. The echoed
/// lines are matched whole: ps shows the script that prints them.
fn assert_sees(lines: &[String], marker: &str) {
    assert!(
        lines.iter().any(|line| line.ends_with("/bin/sleep 1000")),
        "the target's sleep is missing from {lines:?}"
    );
    for wanted in [marker, "cgroup-memory-ok", "cgroup-read-only"] {
        assert!(
            lines.iter().any(|line| line == wanted),
            "{wanted:?} missing from {lines:?}"
        );
    }
}

fn attempt(mut config: ContainerConfig, attempt: u32) -> ContainerConfig {
    if let Some(metadata) = config.metadata.as_mut() {
        metadata.attempt = attempt;
    }
    config.log_path = format!(
        "{}.{attempt}.log",
        config.metadata.clone().unwrap_or_default().name
    );
    config
}

#[tokio::test(flavor = "multi_thread")]
async fn pid_target_on_a_target_that_ran_many_processes() {
    let harness = Harness::start().await;
    let image = harness.image.clone();
    let (pod, pod_cfg) = harness.run_pod("busy", NamespaceMode::Container).await;
    let app = start_running(
        &harness,
        &pod,
        &pod_cfg,
        sleeper("app", &image, "marker-busy"),
    )
    .await;
    run_many_processes(&harness, &app).await;

    let debug = with_pid(looker("debug", &image), NamespaceMode::Target, &app);
    let lines = run_to_completion(&harness, &pod, &pod_cfg, debug).await;
    assert_sees(&lines, "marker-busy");

    harness.remove_pod(&pod).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn pid_target_on_a_restarted_target() {
    let harness = Harness::start().await;
    let image = harness.image.clone();
    let (pod, pod_cfg) = harness.run_pod("restarted", NamespaceMode::Container).await;

    // The first attempt runs many processes and exits, as a container
    // killed by a failing probe does.
    let first = start_running(
        &harness,
        &pod,
        &pod_cfg,
        attempt(sleeper("app", &image, "marker-first"), 0),
    )
    .await;
    run_many_processes(&harness, &first).await;
    harness
        .client()
        .await
        .stop_container(cri_api::v1::StopContainerRequest {
            container_id: first.clone(),
            timeout: 0,
        })
        .await
        .unwrap_or_else(|status| panic!("StopContainer {first}: {status:?}"));

    // The restarted target: quiet, then busy.
    let second = start_running(
        &harness,
        &pod,
        &pod_cfg,
        attempt(sleeper("app", &image, "marker-second"), 1),
    )
    .await;
    let debug = with_pid(looker("debug", &image), NamespaceMode::Target, &second);
    let lines = run_to_completion(&harness, &pod, &pod_cfg, attempt(debug.clone(), 0)).await;
    assert_sees(&lines, "marker-second");

    run_many_processes(&harness, &second).await;
    let lines = run_to_completion(&harness, &pod, &pod_cfg, attempt(debug, 1)).await;
    assert_sees(&lines, "marker-second");

    harness.remove_pod(&pod).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_container_recreated_in_a_shared_pid_pod() {
    let harness = Harness::start().await;
    let image = harness.image.clone();
    let (pod, pod_cfg) = harness.run_pod("shared", NamespaceMode::Pod).await;
    let in_pod = |config| with_pid(config, NamespaceMode::Pod, "");

    let app = start_running(
        &harness,
        &pod,
        &pod_cfg,
        in_pod(sleeper("app", &image, "marker-shared")),
    )
    .await;
    let lines = run_to_completion(
        &harness,
        &pod,
        &pod_cfg,
        attempt(in_pod(looker("worker", &image)), 0),
    )
    .await;
    assert_sees(&lines, "marker-shared");

    run_many_processes(&harness, &app).await;
    let lines = run_to_completion(
        &harness,
        &pod,
        &pod_cfg,
        attempt(in_pod(looker("worker", &image)), 1),
    )
    .await;
    assert_sees(&lines, "marker-shared");

    harness.remove_pod(&pod).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_privileged_ephemeral_container_is_judged_by_the_requests_sandbox_config() {
    let harness = Harness::start().await;
    let image = harness.image.clone();
    let (pod, pod_cfg) = harness.run_pod("sysadmin", NamespaceMode::Container).await;
    let app = start_running(
        &harness,
        &pod,
        &pod_cfg,
        sleeper("app", &image, "marker-sys"),
    )
    .await;

    let privileged = |name: &str| {
        let mut config = with_pid(looker(name, &image), NamespaceMode::Target, &app);
        if let Some(context) = config
            .linux
            .as_mut()
            .and_then(|linux| linux.security_context.as_mut())
        {
            context.privileged = true;
        }
        config
    };
    // The sandbox config berth stored is not privileged.
    let err = harness
        .create(&pod, &pod_cfg, privileged("refused"))
        .await
        .expect_err("a privileged container in an unprivileged sandbox");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("not privileged"), "{err:?}");

    // kubelet sends the pod's config rebuilt as privileged once it has a
    // privileged ephemeral container.
    let mut privileged_cfg = pod_cfg.clone();
    if let Some(context) = privileged_cfg
        .linux
        .as_mut()
        .and_then(|linux| linux.security_context.as_mut())
    {
        context.privileged = true;
    }
    let id = harness
        .create_ok(&pod, &privileged_cfg, privileged("debugger"))
        .await;
    harness.start_container(&id).await;
    let status = harness
        .wait_state(&id, ContainerState::ContainerExited)
        .await;
    assert_eq!(status.exit_code, 0, "{status:?}");
    let lines = log_lines(&log_file(&pod_cfg, &status));
    assert!(lines.iter().any(|line| line == "marker-sys"), "{lines:?}");
    // Privileged: its cgroups are writable.
    assert!(
        !lines.iter().any(|line| line == "cgroup-read-only"),
        "{lines:?}"
    );

    harness.remove_pod(&pod).await;
}
