//! RuntimeClass handlers through a real berthd: a pod whose handler is
//! `runc` has its containers made by runc 1.5.2 (runc's own state root
//! knows them, and their init is the process runc reports), exec and logs
//! work, and stop and remove leave nothing in runc's root; a pod of the
//! default handler never reaches runc. Start-up refuses the old list form
//! and a handler whose runtime is missing, naming them. A pod whose handler
//! is `crun` has its container made by crun the same way; crun 1.8.1
//! (Debian 12's) has no `features` command, so Status reports neither
//! feature for it.
//!
//! runc is the one `scripts/containerd/install.sh` builds
//! (`/usr/local/lib/berth-containerd/v2.4.2/runc`), or `BERTH_TEST_RUNC`;
//! crun is `/usr/bin/crun` (scripts/install-deps.sh), or `BERTH_TEST_CRUN`.
//! Without one, its test says so and does not run.
//!
//! A pod whose handler is `runsc` (gVisor, `sandbox_container = true`)
//! gets a sandbox container runsc runs first, and its containers join that
//! one gVisor sandbox. runsc is what `scripts/gvisor/install.sh` builds
//! (about 11 minutes, so no test command builds it), or `BERTH_TEST_RUNSC`
//! (a `runsc-systrap`-like binary: runsc with its platform flag).

use std::path::{Path, PathBuf};
use std::process::Command;

use std::time::Duration;

use berth_tests::host::{kill_shim_of, processes_with, wait_for_process};
use berth_tests::node::Node;
use berth_tests::pods::{busybox_layer_tar, container_config, Harness};
use berth_tests::registry::{Layer, RawTar, TestImage};
use berth_tests::Sandbox;
use cri_api::v1::{
    ContainerState, CreateContainerRequest, ExecSyncRequest, ExecSyncResponse,
    ListContainersRequest, ListPodSandboxRequest, NamespaceMode, PodSandboxStatusRequest,
    StatusRequest,
};

/// runc as `scripts/containerd/install.sh` installs it, or
/// `BERTH_TEST_RUNC`; None (the test skipped, saying so) without it.
fn runc() -> Option<PathBuf> {
    let path: PathBuf = std::env::var_os("BERTH_TEST_RUNC")
        .map(PathBuf::from)
        .unwrap_or_else(|| "/usr/local/lib/berth-containerd/v2.4.2/runc".into());
    if !path.exists() {
        eprintln!(
            "skipped: no runc (install it with scripts/containerd/install.sh, or set BERTH_TEST_RUNC)"
        );
        return None;
    }
    Some(path)
}

/// The config table of handler `runc` running `runc`.
fn runc_handler(runc: &Path) -> String {
    format!(
        "[runtime_handlers.runc]\nruntime_path = \"{}\"\n",
        runc.display()
    )
}

/// crun as Debian's package installs it, or `BERTH_TEST_CRUN`.
fn crun() -> Option<PathBuf> {
    let path: PathBuf = std::env::var_os("BERTH_TEST_CRUN")
        .map(PathBuf::from)
        .unwrap_or_else(|| "/usr/bin/crun".into());
    path.exists().then_some(path)
}

/// `<runtime> --root <root> <args>`, which must succeed; its stdout.
fn runtime_says(runtime: &Path, root: &Path, args: &[&str]) -> String {
    let output = Command::new(runtime)
        .arg("--root")
        .arg(root)
        .args(args)
        .output()
        .expect("run the runtime");
    assert!(
        output.status.success(),
        "{} {args:?}: {}",
        runtime.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The containers the runtime's root holds, by id (runc and crun both
/// list as JSON).
fn runtime_ids(runtime: &Path, root: &Path) -> Vec<String> {
    let list = runtime_says(runtime, root, &["list", "--format", "json"]);
    let list: serde_json::Value = serde_json::from_str(list.trim()).unwrap_or_default();
    list.as_array()
        .map(|all| {
            all.iter()
                .filter_map(|c| c["id"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The runtime made container `id` (whose command is `sleep 3600`): its
/// root holds it alone, running, and the pid it reports runs that command.
fn assert_made_by(runtime: &Path, root: &Path, id: &str) {
    assert_eq!(runtime_ids(runtime, root), [id]);
    let state: serde_json::Value =
        serde_json::from_str(&runtime_says(runtime, root, &["state", id])).expect("state");
    assert_eq!(state["status"], "running", "{state}");
    let pid = state["pid"].as_i64().expect("pid");
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).expect("the init runs");
    assert_eq!(
        String::from_utf8_lossy(&cmdline).replace('\0', " ").trim(),
        "sleep 3600"
    );
}

/// ExecSync in container `id` works, and its log (of pod `pod_name`,
/// container `app`) has `line`.
async fn assert_exec_and_log(harness: &Harness, id: &str, pod_name: &str, line: &str) {
    let exec = harness
        .client()
        .await
        .exec_sync(ExecSyncRequest {
            container_id: id.to_string(),
            cmd: vec!["sh".into(), "-c".into(), "echo exec $$; exit 3".into()],
            timeout: 20,
        })
        .await
        .expect("ExecSync")
        .into_inner();
    assert_eq!(exec.exit_code, 3);
    assert!(
        String::from_utf8_lossy(&exec.stdout).starts_with("exec "),
        "{exec:?}"
    );
    let log = std::fs::read_to_string(harness.log_dir(pod_name).join("app.log")).expect("log");
    assert!(log.contains(&format!("stdout F {line}")), "{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_with_handler_runc_runs_under_runc() {
    let Some(runc) = runc() else {
        return;
    };
    let node = Node::start_with(&runc_handler(&runc), &[]);
    let harness = Harness::start_on(node).await;
    let root = harness.berthd.sandbox.state().join("runtimes/runc");
    let mut client = harness.client().await;

    // Status lists the handler with what runc says it supports.
    let status = client
        .status(StatusRequest::default())
        .await
        .expect("Status")
        .into_inner();
    let handler = status
        .runtime_handlers
        .iter()
        .find(|h| h.name == "runc")
        .expect("handler runc in Status");
    let features = handler.features.expect("features");
    assert!(
        features.recursive_read_only_mounts && features.user_namespaces,
        "{features:?}"
    );

    let (pod, config) = harness
        .run_pod_under("fast", NamespaceMode::Pod, "runc")
        .await;
    let id = harness
        .run_container(
            &pod,
            &config,
            container_config(
                "app",
                &harness.image,
                &["sh", "-c", "echo started under a handler; exec sleep 3600"],
            ),
        )
        .await;

    assert_made_by(&runc, &root, &id);
    assert_exec_and_log(&harness, &id, "fast", "started under a handler").await;

    // A pod of the default handler never reaches runc.
    let (plain, plain_config) = harness.run_pod("plain", NamespaceMode::Pod).await;
    let other = harness
        .run_container(
            &plain,
            &plain_config,
            container_config("app", &harness.image, &["sleep", "3600"]),
        )
        .await;
    assert_eq!(runtime_ids(&runc, &root), std::slice::from_ref(&id));
    assert!(harness
        .berthd
        .sandbox
        .state()
        .join("runtime")
        .join(&other)
        .exists());

    // Stop and remove: runc's root is left empty.
    harness.stop_container(&id, 10).await;
    harness
        .wait_state(&id, ContainerState::ContainerExited)
        .await;
    harness.remove_container(&id).await;
    assert!(runtime_ids(&runc, &root).is_empty());
    let left: Vec<_> = std::fs::read_dir(&root)
        .expect("runc root")
        .flatten()
        .map(|entry| entry.file_name())
        .collect();
    assert!(left.is_empty(), "runc's root keeps {left:?}");

    // A second container in the pod, removed with the pod.
    let again = harness
        .run_container(
            &pod,
            &config,
            container_config("again", &harness.image, &["sleep", "3600"]),
        )
        .await;
    assert_eq!(runtime_ids(&runc, &root), [again]);
    harness.remove_pod(&pod).await;
    harness.remove_pod(&plain).await;
    assert!(runtime_ids(&runc, &root).is_empty());
    assert_eq!(std::fs::read_dir(&root).expect("runc root").count(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_with_handler_crun_runs_under_crun() {
    let Some(crun) = crun() else {
        eprintln!("skipped: no crun (apt-get install crun, or set BERTH_TEST_CRUN)");
        return;
    };
    let node = Node::start_with(
        &format!(
            "[runtime_handlers.crun]\nruntime_path = \"{}\"\n",
            crun.display()
        ),
        &[],
    );
    let harness = Harness::start_on(node).await;
    let root = harness.berthd.sandbox.state().join("runtimes/crun");
    let mut client = harness.client().await;

    // Status: without a `features` command (crun before 1.9) the handler
    // is listed with neither feature; berthd starts all the same.
    let has_features = Command::new(&crun)
        .arg("features")
        .output()
        .expect("run crun")
        .status
        .success();
    let status = client
        .status(StatusRequest::default())
        .await
        .expect("Status")
        .into_inner();
    let handler = status
        .runtime_handlers
        .iter()
        .find(|h| h.name == "crun")
        .expect("handler crun in Status");
    let features = handler.features.expect("features");
    if !has_features {
        assert!(
            !features.recursive_read_only_mounts && !features.user_namespaces,
            "{features:?}"
        );
    }

    let (pod, config) = harness
        .run_pod_under("crun", NamespaceMode::Pod, "crun")
        .await;
    let app = container_config(
        "app",
        &harness.image,
        &["sh", "-c", "echo started under crun; exec sleep 3600"],
    );

    // crun (1.8.1 at least) refuses a cgroup v1 host whose unified
    // hierarchy holds a controller: CreateContainer fails with crun's own
    // reason, and crun's root keeps nothing.
    if hybrid_with_v2_controllers() {
        let err = client
            .create_container(CreateContainerRequest {
                pod_sandbox_id: pod.clone(),
                config: Some(app),
                sandbox_config: Some(config.clone()),
            })
            .await
            .expect_err("crun refuses a hybrid cgroup host");
        assert!(err.message().contains("hybrid mode"), "{err:?}");
        assert!(runtime_ids(&crun, &root).is_empty());
        harness.remove_pod(&pod).await;
        eprintln!("crun refuses this host's cgroup layout (hybrid, controllers on cgroup2)");
        return;
    }
    let id = harness.run_container(&pod, &config, app).await;

    assert_made_by(&crun, &root, &id);
    assert_exec_and_log(&harness, &id, "crun", "started under crun").await;

    // Stop and remove: crun's root is left empty.
    harness.stop_container(&id, 10).await;
    harness
        .wait_state(&id, ContainerState::ContainerExited)
        .await;
    harness.remove_container(&id).await;
    assert!(runtime_ids(&crun, &root).is_empty());
    harness.remove_pod(&pod).await;
    assert_eq!(std::fs::read_dir(&root).expect("crun root").count(), 0);
}

/// A cgroup v1 host whose unified hierarchy (`/sys/fs/cgroup/unified`)
/// has a controller, as when no v1 hierarchy mounts hugetlb.
fn hybrid_with_v2_controllers() -> bool {
    std::fs::read_to_string("/sys/fs/cgroup/unified/cgroup.controllers")
        .is_ok_and(|controllers| !controllers.trim().is_empty())
}

#[tokio::test(flavor = "multi_thread")]
async fn runc_containers_survive_restarts_and_a_dead_shim_and_an_unconfigured_handler() {
    let Some(runc) = runc() else {
        return;
    };
    let handler_table = runc_handler(&runc);
    let node = Node::start_with(&handler_table, &[]);
    let mut harness = Harness::start_on(node).await;
    let root = harness.berthd.sandbox.state().join("runtimes/runc");
    let (pod, config) = harness
        .run_pod_under("kept", NamespaceMode::Pod, "runc")
        .await;
    let marker = format!("7{}", std::process::id());
    let id = harness
        .run_container(
            &pod,
            &config,
            container_config("app", &harness.image, &["sleep", &marker]),
        )
        .await;

    // A restart finds it running, under runc.
    harness
        .berthd
        .restart_on_same_dirs(nix::sys::signal::Signal::SIGTERM, Duration::ZERO);
    harness
        .wait_state(&id, ContainerState::ContainerRunning)
        .await;
    assert_eq!(runtime_ids(&runc, &root), std::slice::from_ref(&id));

    // Its shim killed: stopped through its cgroup, removed through runc.
    wait_for_process(&["sleep", &marker]).await;
    kill_shim_of(&id).await;
    harness.stop_container(&id, 10).await;
    assert!(processes_with(&["sleep", &marker]).is_empty());
    harness.remove_container(&id).await;
    assert!(
        runtime_ids(&runc, &root).is_empty(),
        "runc still knows {id}"
    );
    assert_eq!(std::fs::read_dir(&root).expect("runc root").count(), 0);

    // A container, then a restart whose config lost the handler: the pod
    // and the container are kept, nothing is made under another runtime.
    let second = harness
        .run_container(
            &pod,
            &config,
            container_config("second", &harness.image, &["sleep", "3600"]),
        )
        .await;
    let config_path = harness.berthd.sandbox.config_path();
    let full = std::fs::read_to_string(&config_path).expect("config");
    std::fs::write(&config_path, full.replace(&handler_table, "")).expect("config");
    harness
        .berthd
        .restart_on_same_dirs(nix::sys::signal::Signal::SIGTERM, Duration::ZERO);
    let log = harness
        .berthd
        .log_once_it_has(&["runtime handler is not configured", "handler=runc"]);
    assert!(
        log.contains("runtime handler is not configured") && log.contains("handler=runc"),
        "{log}"
    );
    let mut client = harness.client().await;
    let pods = client
        .list_pod_sandbox(ListPodSandboxRequest::default())
        .await
        .expect("ListPodSandbox")
        .into_inner()
        .items;
    assert!(pods
        .iter()
        .any(|p| p.id == pod && p.runtime_handler == "runc"));
    let containers = client
        .list_containers(ListContainersRequest::default())
        .await
        .expect("ListContainers")
        .into_inner()
        .containers;
    assert!(containers.iter().any(|c| c.id == second));
    let err = client
        .create_container(CreateContainerRequest {
            pod_sandbox_id: pod.clone(),
            config: Some(container_config("third", &harness.image, &["sleep", "1"])),
            sandbox_config: Some(config.clone()),
        })
        .await
        .expect_err("a container under an unconfigured handler");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    assert!(err.message().contains("\"runc\""), "{err:?}");
    assert_eq!(runtime_ids(&runc, &root), std::slice::from_ref(&second));

    // Configured again: removed as any other, runc's root left empty.
    std::fs::write(&config_path, &full).expect("config");
    harness
        .berthd
        .restart_on_same_dirs(nix::sys::signal::Signal::SIGTERM, Duration::ZERO);
    harness.remove_pod(&pod).await;
    assert!(runtime_ids(&runc, &root).is_empty());
    assert_eq!(std::fs::read_dir(&root).expect("runc root").count(), 0);
}

#[test]
fn start_up_refuses_the_old_list_and_a_missing_runtime() {
    let sandbox = Sandbox::new();
    let stderr = sandbox.refused_start("runtime_handlers = [\"runsc\"]");
    assert!(stderr.contains("`runtime_handlers`"), "{stderr}");
    assert!(stderr.contains("[runtime_handlers.runsc]"), "{stderr}");

    let missing = sandbox.dir.path().join("no-runsc");
    let stderr = sandbox.refused_start(&format!(
        "[runtime_handlers.runsc]\nruntime_path = \"{}\"",
        missing.display()
    ));
    assert!(stderr.contains("runtime_path"), "{stderr}");
    assert!(stderr.contains("\"runsc\""), "{stderr}");
    assert!(stderr.contains(&missing.display().to_string()), "{stderr}");
}

/// runsc with `--platform=systrap` as `scripts/gvisor/install.sh` installs
/// it, or `BERTH_TEST_RUNSC`.
fn runsc() -> Option<PathBuf> {
    let path: PathBuf = std::env::var_os("BERTH_TEST_RUNSC")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            "/usr/local/lib/berth-gvisor/v0.0.0-20260905035102-160fafc42237/runsc-systrap".into()
        });
    if !path.exists() {
        eprintln!(
            "skipped: no runsc (build it with scripts/gvisor/install.sh, about 11 minutes, \
             or set BERTH_TEST_RUNSC)"
        );
        return None;
    }
    Some(path)
}

/// The pod sandbox image's stand-in: busybox whose command (`/hello`, the
/// test image's) sleeps for good, as pause does.
fn pause_image() -> TestImage {
    let hello = RawTar::new()
        .file("hello", b"#!/bin/sh\nexec sleep 2147483647\n", 0o755)
        .finish();
    TestImage::new(vec![Layer::gzip(busybox_layer_tar()), Layer::gzip(hello)])
}

/// ExecSync of `cmd` in container `id`, which must run.
async fn exec(harness: &Harness, id: &str, cmd: &[&str], timeout: i64) -> ExecSyncResponse {
    harness
        .client()
        .await
        .exec_sync(ExecSyncRequest {
            container_id: id.to_string(),
            cmd: cmd.iter().map(|c| c.to_string()).collect(),
            timeout,
        })
        .await
        .unwrap_or_else(|status| panic!("ExecSync {cmd:?} in {id}: {status:?}"))
        .into_inner()
}

/// The command lines of the processes container `id` sees.
async fn seen_processes(harness: &Harness, id: &str) -> String {
    let ps = exec(
        harness,
        id,
        &[
            "sh",
            "-c",
            "cat /proc/[0-9]*/cmdline | busybox tr '\\0' ' '; echo",
        ],
        20,
    )
    .await;
    assert_eq!(ps.exit_code, 0, "{ps:?}");
    String::from_utf8_lossy(&ps.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_with_handler_runsc_runs_in_one_gvisor_sandbox() {
    let Some(runsc) = runsc() else {
        return;
    };
    let pause = pause_image();
    let pause_id = pause.build().id().to_string();
    let node = Node::start_with(
        &format!(
            "[runtime_handlers.runsc]\nruntime_path = \"{}\"\nsandbox_container = true\n\
             sandbox_image = \"{pause_id}\"\n",
            runsc.display()
        ),
        &[],
    );
    let harness = Harness::start_on(node).await;
    let root = harness.berthd.sandbox.state().join("runtimes/runsc");
    harness.push_and_pull("test/pause", &pause).await;

    // RunPodSandbox has runsc run the pod's sandbox container: its id is
    // the pod's, and runsc's root holds it, running.
    let (pod, config) = harness
        .run_pod_under("gvisor", NamespaceMode::Pod, "runsc")
        .await;
    assert_eq!(runtime_ids(&runsc, &root), std::slice::from_ref(&pod));
    let state: serde_json::Value =
        serde_json::from_str(&runtime_says(&runsc, &root, &["state", &pod])).expect("state");
    assert_eq!(state["status"], "running", "{state}");
    let status = harness
        .client()
        .await
        .pod_sandbox_status(PodSandboxStatusRequest {
            pod_sandbox_id: pod.clone(),
            verbose: true,
        })
        .await
        .expect("PodSandboxStatus")
        .into_inner();
    let info = status.info.get("info").expect("verbose info");
    assert!(info.contains("\"sandboxContainer\""), "{info}");

    let app = harness
        .run_container(
            &pod,
            &config,
            container_config(
                "app",
                &harness.image,
                &["sh", "-c", "echo started under gvisor; exec sleep 3601"],
            ),
        )
        .await;
    let peer = harness
        .run_container(
            &pod,
            &config,
            container_config("peer", &harness.image, &["sleep", "3602"]),
        )
        .await;

    // runsc made all three, and kubelet sees only its two containers.
    let mut ids = runtime_ids(&runsc, &root);
    ids.sort();
    let mut expected = vec![pod.clone(), app.clone(), peer.clone()];
    expected.sort();
    assert_eq!(ids, expected);
    let listed = harness
        .client()
        .await
        .list_containers(ListContainersRequest::default())
        .await
        .expect("ListContainers")
        .into_inner()
        .containers;
    let mut listed: Vec<String> = listed.into_iter().map(|c| c.id).collect();
    listed.sort();
    let mut apps = vec![app.clone(), peer.clone()];
    apps.sort();
    assert_eq!(listed, apps);

    // gVisor's kernel runs them, not the host's: the kernel release they
    // see is the one the Sentry reports.
    let host_release = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("osrelease");
    let release = exec(&harness, &app, &["busybox", "uname", "-r"], 20).await;
    let release = String::from_utf8_lossy(&release.stdout).trim().to_string();
    assert!(
        !release.is_empty() && release != host_release.trim(),
        "the container sees the host's kernel {release:?}"
    );
    assert_exec_and_log(&harness, &app, "gvisor", "started under gvisor").await;

    // One gVisor kernel: each container sees the other's process (the pod
    // shares its PID namespace) and the sandbox container's.
    let from_app = seen_processes(&harness, &app).await;
    assert!(from_app.contains("sleep 3602"), "{from_app}");
    assert!(from_app.contains("sleep 2147483647"), "{from_app}");
    let from_peer = seen_processes(&harness, &peer).await;
    assert!(from_peer.contains("sleep 3601"), "{from_peer}");

    // A timed-out exec is killed inside the sandbox, not only its
    // host-side `runsc exec`.
    let err = harness
        .client()
        .await
        .exec_sync(ExecSyncRequest {
            container_id: app.clone(),
            cmd: vec!["sleep".into(), "4242".into()],
            timeout: 1,
        })
        .await
        .expect_err("a timed-out ExecSync");
    assert_eq!(err.code(), tonic::Code::DeadlineExceeded, "{err:?}");
    let mut left = String::new();
    for _ in 0..50 {
        left = seen_processes(&harness, &peer).await;
        if !left.contains("sleep 4242") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        !left.contains("sleep 4242"),
        "the timed-out exec still runs: {left}"
    );

    // Remove the pod: runsc's root keeps no container, only runsc's own
    // `null-netns` (the empty network namespace its gofers share, a file
    // recovery's sweep of state dirs leaves alone).
    harness.remove_pod(&pod).await;
    assert!(runtime_ids(&runsc, &root).is_empty());
    let left: Vec<_> = std::fs::read_dir(&root)
        .expect("runsc root")
        .flatten()
        .filter(|entry| entry.file_name() != "null-netns")
        .map(|entry| entry.file_name())
        .collect();
    assert!(left.is_empty(), "runsc's root keeps {left:?}");
}
