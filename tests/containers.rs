//! Containers against a real berthd: a busybox image built from the host's
//! Debian busybox, pushed to a local registry and pulled through CRI, then
//! run in pod sandboxes.
//!
//! Each test starts its own berthd, registry and CNI network on a node of
//! its own (`support/node.rs`: bridge, subnet and cgroup root named after the
//! test binary's pid and a counter); the node's guard removes what a failed
//! test left: pods (through berthd), the shims berthd started for this test,
//! processes in the test's own cgroups, the cgroups, mounts under the temp
//! dir, and the bridge.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use berth_tests::host::{
    cgroup_hierarchies, cgroup_subtree, mounts_under, processes_with, read_procs,
};
use berth_tests::pods::{container_config, pids_mentioning, with_pid, Harness, SETTLE};
use cri_api::v1::{
    ContainerFilter, ContainerState, ContainerStatus, ContainerStatusRequest, ExecSyncRequest,
    ImageSpec, ImageStatusRequest, LinuxContainerConfig, LinuxContainerResources,
    ListContainersRequest, NamespaceMode, PodSandboxConfig, StopContainerRequest,
    UpdateContainerResourcesRequest,
};

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
    let harness = Harness::start().await;
    let image = harness.image.clone();
    let (pod, pod_cfg) = harness.run_pod("target", NamespaceMode::Container).await;

    let app = harness
        .run_container(
            &pod,
            &pod_cfg,
            container_config("app", &image, &["/bin/sleep", "1000"]),
        )
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
        .run_container(
            &other_pod,
            &other_cfg,
            container_config("other-app", &image, &["/bin/sleep", "1000"]),
        )
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
    let mut harness = Harness::start().await;
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

    for id in [&ticker, &quitter] {
        harness.remove_container(id).await;
    }
    harness.remove_pod(&pod).await;
    let mounts = mounts_under(harness.berthd.sandbox.dir.path());
    assert!(mounts.is_empty(), "mounts left: {mounts:?}");
    let shims = pids_mentioning(&harness.berthd.sandbox.dir.path().display().to_string());
    assert!(shims.is_empty(), "shims left running: {shims:?}");
}

/// Waits until no process mentions `needle`; the ones left, if any.
async fn gone(needle: &str) -> Vec<i32> {
    let deadline = Instant::now() + SETTLE;
    loop {
        let left = processes_with(&[needle]);
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The cgroup dirs (in every hierarchy, under the pod's parent) whose name
/// is the container's id.
fn cgroup_dirs_of(parent: &str, id: &str) -> Vec<PathBuf> {
    cgroup_hierarchies()
        .into_iter()
        .flat_map(|h| cgroup_subtree(&h.join(parent.trim_start_matches('/'))))
        .filter(|dir| dir.file_name().is_some_and(|name| name == id))
        .collect()
}

/// A container in its pod's PID namespace does not die with its init: the
/// shim kills what the init left, StopContainer's SIGKILL reaches every
/// process (not only the init), and RemoveContainer removes its cgroup in
/// every hierarchy (the shim does both in the cgroup dirs berthd names).
#[tokio::test(flavor = "multi_thread")]
async fn a_container_in_the_pod_pid_namespace_dies_whole_and_leaves_no_cgroup() {
    let harness = Harness::start().await;
    let image = harness.image.clone();
    let (pod, pod_cfg) = harness.run_pod("whole", NamespaceMode::Pod).await;
    let parent = harness.parent("whole");

    // The init exits at once and leaves a sleep behind.
    let leaver = harness
        .create_ok(
            &pod,
            &pod_cfg,
            container_config("leaver", &image, &["/bin/sh", "-c", "sleep 1001 & sleep 1"]),
        )
        .await;
    harness.start_container(&leaver).await;
    harness
        .wait_state(&leaver, ContainerState::ContainerExited)
        .await;
    assert_eq!(
        gone("sleep 1001").await,
        Vec::<i32>::new(),
        "what the init left runs on"
    );

    // SIGTERM is ignored by both processes: only SIGKILL to all stops it.
    let stubborn = harness
        .run_container(
            &pod,
            &pod_cfg,
            container_config(
                "stubborn",
                &image,
                &["/bin/sh", "-c", "trap '' TERM; sleep 1002 & sleep 1003"],
            ),
        )
        .await;
    let deadline = Instant::now() + SETTLE;
    while processes_with(&["sleep 1002"]).is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let dirs = cgroup_dirs_of(&parent, &stubborn);
    assert!(
        !dirs.is_empty(),
        "no cgroup named {stubborn} under {parent}"
    );
    assert!(
        dirs.iter().any(|dir| !read_procs(dir).is_empty()),
        "the container's processes are not in {dirs:?}"
    );
    harness.stop_container(&stubborn, 0).await;
    assert_eq!(
        gone("sleep 100").await,
        Vec::<i32>::new(),
        "processes survived the stop"
    );

    for id in [&leaver, &stubborn] {
        harness.remove_container(id).await;
        let left = cgroup_dirs_of(&parent, id);
        assert!(left.is_empty(), "cgroups of {id} left: {left:?}");
    }
    harness.remove_pod(&pod).await;
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
    let harness = Harness::start().await;
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
    let app = harness.run_container(&pod, &pod_cfg, config).await;
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

    // Removal renames the container's directories into the trash at once
    // and deletes them in the background.
    let sandbox = &harness.berthd.sandbox;
    assert!(!sandbox.root().join("containers").join(&app).exists());
    assert!(!sandbox.state().join("containers").join(&app).exists());
    let trash_empty = || {
        [sandbox.root(), sandbox.state()].iter().all(|base| {
            std::fs::read_dir(base.join("trash"))
                .map_or(true, |mut entries| entries.next().is_none())
        })
    };
    let deadline = Instant::now() + SETTLE;
    while !trash_empty() {
        assert!(Instant::now() < deadline, "the trash was not purged");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The image of a container in ContainerStatus and ListContainers, as
/// (image.image, image.user_specified_image, image_ref, image_id).
async fn reported_image(harness: &Harness, id: &str) -> [(String, String, String, String); 2] {
    let status = harness.status(id).await;
    let spec = status.image.clone().unwrap_or_default();
    let listed = harness
        .client()
        .await
        .list_containers(ListContainersRequest {
            filter: Some(ContainerFilter {
                id: id.to_string(),
                ..Default::default()
            }),
        })
        .await
        .unwrap_or_else(|status| panic!("ListContainers: {status:?}"))
        .into_inner()
        .containers;
    assert_eq!(listed.len(), 1, "{listed:?}");
    let listed = &listed[0];
    let listed_spec = listed.image.clone().unwrap_or_default();
    [
        (
            spec.image,
            spec.user_specified_image,
            status.image_ref,
            status.image_id,
        ),
        (
            listed_spec.image,
            listed_spec.user_specified_image,
            listed.image_ref.clone(),
            listed.image_id.clone(),
        ),
    ]
}

/// kubelet creates a container with the resolved image id in `image.image`
/// and the pod's image in `user_specified_image`, and compares the status's
/// image with the pod's (its image-update handling waits for the new name):
/// the status names the image the pod asked for, before and after a
/// berthd restart, and the id stays in image_ref and image_id.
#[tokio::test(flavor = "multi_thread")]
async fn the_status_names_the_image_the_pod_asked_for() {
    let mut harness = Harness::start().await;
    let name = harness.image.clone();
    let image_id = harness
        .berthd
        .image_client()
        .await
        .image_status(ImageStatusRequest {
            image: Some(ImageSpec {
                image: name.clone(),
                ..Default::default()
            }),
            verbose: false,
        })
        .await
        .unwrap_or_else(|status| panic!("ImageStatus {name}: {status:?}"))
        .into_inner()
        .image
        .unwrap_or_else(|| panic!("no image {name}"))
        .id;
    assert!(image_id.starts_with("sha256:"), "{image_id}");
    let (pod, pod_cfg) = harness.run_pod("named", NamespaceMode::Pod).await;

    let mut as_kubelet = container_config("as-kubelet", &image_id, &["sleep", "60"]);
    as_kubelet.image = Some(ImageSpec {
        image: image_id.clone(),
        user_specified_image: name.clone(),
        ..Default::default()
    });
    let as_kubelet = harness.create_ok(&pod, &pod_cfg, as_kubelet).await;
    // crictl create: only image.image, the name.
    let by_name = harness
        .create_ok(
            &pod,
            &pod_cfg,
            container_config("by-name", &name, &["sleep", "60"]),
        )
        .await;
    let expected = (
        name.clone(),
        name.clone(),
        image_id.clone(),
        image_id.clone(),
    );
    for id in [&as_kubelet, &by_name] {
        assert_eq!(
            reported_image(&harness, id).await,
            [expected.clone(), expected.clone()],
            "container {id}"
        );
    }

    harness.berthd.restart_on_same_dirs(
        nix::sys::signal::Signal::SIGTERM,
        Duration::from_millis(100),
    );
    for id in [&as_kubelet, &by_name] {
        assert_eq!(
            reported_image(&harness, id).await,
            [expected.clone(), expected.clone()],
            "container {id} after a berthd restart"
        );
    }

    for id in [&as_kubelet, &by_name] {
        harness.remove_container(id).await;
    }
    harness.remove_pod(&pod).await;
}

/// ExecSync without a timeout runs until its command ends, past any bound
/// of berthd's own (kubelet runs exec hooks so: a preStop hook may run for
/// the whole grace period), and a client that gives up on the call kills
/// the command, as containerd does.
#[tokio::test(flavor = "multi_thread")]
async fn exec_sync_without_a_timeout_runs_until_done_or_abandoned() {
    let harness = Harness::start().await;
    let (pod, cfg) = harness.run_pod("execwait", NamespaceMode::Pod).await;
    let id = harness
        .run_container(
            &pod,
            &cfg,
            container_config("app", &harness.image, &["sleep", "3600"]),
        )
        .await;

    // Longer than the 30 s any other call to a shim may take.
    let done = harness
        .client()
        .await
        .exec_sync(ExecSyncRequest {
            container_id: id.clone(),
            cmd: vec!["sh".into(), "-c".into(), "sleep 35; echo done".into()],
            timeout: 0,
        })
        .await
        .expect("ExecSync without a timeout")
        .into_inner();
    assert_eq!(done.exit_code, 0, "{done:?}");
    assert_eq!(String::from_utf8_lossy(&done.stdout), "done\n");

    // A client that stops waiting: its command goes.
    let mut client = harness.client().await;
    let container_id = id.clone();
    let call = tokio::spawn(async move {
        let mut request = tonic::Request::new(ExecSyncRequest {
            container_id,
            cmd: vec!["sleep".into(), "1001".into()],
            timeout: 0,
        });
        request.set_timeout(Duration::from_secs(10));
        client.exec_sync(request).await
    });
    let deadline = Instant::now() + SETTLE;
    while processes_with(&["sleep 1001"]).is_empty() {
        assert!(Instant::now() < deadline, "the exec never started");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let answer = call.await.expect("the call's task");
    assert!(answer.is_err(), "the client gave up: {answer:?}");
    let left = gone("sleep 1001").await;
    assert!(left.is_empty(), "the abandoned exec still runs: {left:?}");
    harness.remove_pod(&pod).await;
}
