//! RuntimeClass handlers through a real berthd: a pod whose handler is
//! `runc` has its containers made by runc 1.5.2 (runc's own state root
//! knows them, and their init is the process runc reports), exec and logs
//! work, and stop and remove leave nothing in runc's root; a pod of the
//! default handler never reaches runc. Start-up refuses the old list form
//! and a handler whose runtime is missing, naming them.
//!
//! runc is the one `scripts/containerd/install.sh` builds
//! (`/usr/local/lib/berth-containerd/v2.4.2/runc`), or `BERTH_TEST_RUNC`;
//! without it the runc test says so and does not run.

use std::path::{Path, PathBuf};
use std::process::Command;

use berth_tests::host::log_tail;
use berth_tests::node::Node;
use berth_tests::pods::{container_config, pod_config, Harness};
use berth_tests::Sandbox;
use cri_api::v1::{
    ContainerState, ExecSyncRequest, NamespaceMode, RunPodSandboxRequest, StatusRequest,
};

/// runc as `scripts/containerd/install.sh` installs it, or
/// `BERTH_TEST_RUNC`.
fn runc() -> Option<PathBuf> {
    let path: PathBuf = std::env::var_os("BERTH_TEST_RUNC")
        .map(PathBuf::from)
        .unwrap_or_else(|| "/usr/local/lib/berth-containerd/v2.4.2/runc".into());
    path.exists().then_some(path)
}

/// `runc --root <root> <args>`, which must succeed; its stdout.
fn runc_says(runc: &Path, root: &Path, args: &[&str]) -> String {
    let output = Command::new(runc)
        .arg("--root")
        .arg(root)
        .args(args)
        .output()
        .expect("run runc");
    assert!(
        output.status.success(),
        "runc {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The containers runc's root holds, by id.
fn runc_ids(runc: &Path, root: &Path) -> Vec<String> {
    let list = runc_says(runc, root, &["list", "--format", "json"]);
    let list: serde_json::Value = serde_json::from_str(list.trim()).unwrap_or_default();
    list.as_array()
        .map(|all| {
            all.iter()
                .filter_map(|c| c["id"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_with_handler_runc_runs_under_runc() {
    let Some(runc) = runc() else {
        eprintln!(
            "skipped: no runc (install it with scripts/containerd/install.sh, or set BERTH_TEST_RUNC)"
        );
        return;
    };
    let node = Node::start_with(
        &format!(
            "[runtime_handlers.runc]\nruntime_path = \"{}\"\n",
            runc.display()
        ),
        &[],
    );
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

    let config = pod_config(
        "fast",
        &harness.parent("fast"),
        &harness.log_dir("fast"),
        NamespaceMode::Pod,
    );
    let pod = client
        .run_pod_sandbox(RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: "runc".into(),
        })
        .await
        .unwrap_or_else(|status| panic!("RunPodSandbox: {status:?}\n{}", log_tail(&harness.berthd)))
        .into_inner()
        .pod_sandbox_id;
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

    // runc made it: its root has the container, running, and the pid it
    // reports is the container's `sleep`.
    assert_eq!(runc_ids(&runc, &root), std::slice::from_ref(&id));
    let state: serde_json::Value =
        serde_json::from_str(&runc_says(&runc, &root, &["state", &id])).expect("runc state");
    assert_eq!(state["status"], "running", "{state}");
    let pid = state["pid"].as_i64().expect("pid");
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).expect("the init runs");
    assert_eq!(
        String::from_utf8_lossy(&cmdline).replace('\0', " ").trim(),
        "sleep 3600"
    );

    // Exec and logs.
    let exec = client
        .exec_sync(ExecSyncRequest {
            container_id: id.clone(),
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
    let log = std::fs::read_to_string(harness.log_dir("fast").join("app.log")).expect("log");
    assert!(log.contains("stdout F started under a handler"), "{log}");

    // A pod of the default handler never reaches runc.
    let (plain, plain_config) = harness.run_pod("plain", NamespaceMode::Pod).await;
    let other = harness
        .run_container(
            &plain,
            &plain_config,
            container_config("app", &harness.image, &["sleep", "3600"]),
        )
        .await;
    assert_eq!(runc_ids(&runc, &root), std::slice::from_ref(&id));
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
    assert!(runc_ids(&runc, &root).is_empty());
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
    assert_eq!(runc_ids(&runc, &root), [again]);
    harness.remove_pod(&pod).await;
    harness.remove_pod(&plain).await;
    assert!(runc_ids(&runc, &root).is_empty());
    assert_eq!(std::fs::read_dir(&root).expect("runc root").count(), 0);
}

#[test]
fn start_up_refuses_the_old_list_and_a_missing_runtime() {
    let sandbox = Sandbox::new();
    let config = sandbox.write_config("runtime_handlers = [\"runsc\"]");
    let output = sandbox.run_to_end(&config, &[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("`runtime_handlers`"), "{stderr}");
    assert!(stderr.contains("[runtime_handlers.runsc]"), "{stderr}");
    assert!(!sandbox.socket().exists(), "no socket when start-up fails");

    let missing = sandbox.dir.path().join("no-runsc");
    let config = sandbox.write_config(&format!(
        "[runtime_handlers.runsc]\nruntime_path = \"{}\"",
        missing.display()
    ));
    let output = sandbox.run_to_end(&config, &[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("runtime_path"), "{stderr}");
    assert!(stderr.contains("\"runsc\""), "{stderr}");
    assert!(stderr.contains(&missing.display().to_string()), "{stderr}");
}
