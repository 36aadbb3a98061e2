//! Calls cut short and shims that die: a RunPodSandbox or CreateContainer
//! whose client gives up mid-way leaves nothing and frees its name for the
//! retry; a container whose shim was killed is still stopped and removed,
//! never reported gone while its processes run.

use std::time::{Duration, Instant};

use berth_tests::host::{
    cgroup_hierarchies, kill_shim_of, log_tail, pids_rooted_under, processes_with, wait_for_process,
};
use berth_tests::pods::{container_config, pod_config, Harness};
use cri_api::v1::*;
use tonic::Code;

/// Client deadlines short enough to cut a create at some step or other.
const DEADLINES_MS: [u64; 5] = [2, 10, 25, 60, 150];

/// Retries `call` while the name is still held by the abandoned call,
/// which undoes itself in the background once it notices. A call that
/// finished just as its client gave up cannot know it was abandoned: then
/// the client finds what it made by name, as kubelet does (`find`).
async fn retry_reserved<T, F, Fut, G, Gut>(what: &str, call: F, find: G) -> T
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T, tonic::Status>>,
    G: Fn() -> Gut,
    Gut: std::future::Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        match call().await {
            Ok(answer) => return answer,
            Err(status)
                if status.code() == Code::AlreadyExists
                    && started.elapsed() < Duration::from_secs(30) =>
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
                // An abandoned call undoes itself within moments of
                // finishing; what is still there after seconds stays.
                if started.elapsed() > Duration::from_secs(3) {
                    if let Some(found) = find().await {
                        return found;
                    }
                }
            }
            Err(status) => panic!("{what} after a cancel: {status:?}"),
        }
    }
}

#[tokio::test]
async fn a_cancelled_run_or_create_leaves_nothing_and_frees_its_name() {
    let harness = Harness::start().await;
    let mut cut_short = 0;
    for (n, deadline) in DEADLINES_MS.iter().enumerate() {
        let name = format!("cancel-{n}");
        let config = pod_config(
            &name,
            &harness.parent(&name),
            &harness.log_dir(&name),
            NamespaceMode::Pod,
        );
        let run = || RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        };
        let mut request = tonic::Request::new(run());
        request.set_timeout(Duration::from_millis(*deadline));
        let first = harness.client().await.run_pod_sandbox(request).await;
        if let Err(status) = &first {
            assert!(
                matches!(status.code(), Code::DeadlineExceeded | Code::Cancelled),
                "{status:?}"
            );
            cut_short += 1;
        }
        let pod = match first {
            Ok(answer) => answer.into_inner().pod_sandbox_id,
            Err(_) => {
                retry_reserved(
                    "RunPodSandbox",
                    || async {
                        let answer = harness.client().await.run_pod_sandbox(run()).await?;
                        Ok(answer.into_inner().pod_sandbox_id)
                    },
                    || async {
                        let pods = harness
                            .client()
                            .await
                            .list_pod_sandbox(ListPodSandboxRequest::default())
                            .await
                            .ok()?
                            .into_inner()
                            .items;
                        pods.into_iter()
                            .find(|pod| pod.metadata.as_ref().is_some_and(|m| m.name == name))
                            .map(|pod| pod.id)
                    },
                )
                .await
            }
        };
        let listed = harness
            .client()
            .await
            .list_pod_sandbox(ListPodSandboxRequest::default())
            .await
            .expect("list")
            .into_inner()
            .items;
        assert_eq!(listed.len(), 1, "only the retry's pod: {listed:?}");

        let container = container_config("app", &harness.image, &["sleep", "3600"]);
        let create = || CreateContainerRequest {
            pod_sandbox_id: pod.clone(),
            config: Some(container.clone()),
            sandbox_config: Some(config.clone()),
        };
        let mut request = tonic::Request::new(create());
        request.set_timeout(Duration::from_millis(*deadline));
        let first = harness.client().await.create_container(request).await;
        if let Err(status) = &first {
            assert!(
                matches!(status.code(), Code::DeadlineExceeded | Code::Cancelled),
                "{status:?}"
            );
            cut_short += 1;
        }
        if first.is_err() {
            retry_reserved(
                "CreateContainer",
                || async {
                    harness.client().await.create_container(create()).await?;
                    Ok(())
                },
                || async {
                    let listed = harness
                        .client()
                        .await
                        .list_containers(ListContainersRequest::default())
                        .await
                        .ok()?
                        .into_inner()
                        .containers;
                    (!listed.is_empty()).then_some(())
                },
            )
            .await;
        }
        let containers = harness
            .client()
            .await
            .list_containers(ListContainersRequest::default())
            .await
            .expect("list")
            .into_inner()
            .containers;
        assert_eq!(
            containers.len(),
            1,
            "only the retry's container: {containers:?}"
        );
        harness.remove_pod(&pod).await;
    }
    assert!(cut_short > 0, "no deadline cut a call short");
    // Nothing of any abandoned attempt is left.
    let state = harness.berthd.sandbox.state();
    let dirs = ["sandboxes", "containers", "shims", "ns"]
        .map(|dir| state.join(dir))
        .into_iter()
        .chain([harness.berthd.sandbox.root().join("pods")]);
    for dir in dirs {
        let left: Vec<_> = std::fs::read_dir(&dir)
            .map(|entries| {
                entries
                    .flatten()
                    .filter(|entry| entry.file_name() != "trash")
                    .map(|entry| entry.path())
                    .collect()
            })
            .unwrap_or_default();
        assert!(
            left.is_empty(),
            "{}: {left:?}\n{}",
            dir.display(),
            log_tail(&harness.berthd)
        );
    }
    let dir = harness.berthd.sandbox.dir.path().display().to_string();
    assert!(processes_with(&["berth-shim", &dir]).is_empty());
    assert!(processes_with(&["berth-pinns", &dir]).is_empty());
    assert!(pids_rooted_under(&harness.berthd.sandbox.state().join("sandboxes")).is_empty());
}

#[tokio::test]
async fn a_container_whose_shim_was_killed_is_stopped_and_removed_for_real() {
    let harness = Harness::start().await;
    let (pod, config) = harness.run_pod("shimless", NamespaceMode::Pod).await;
    let marker = format!("6{}", std::process::id());
    let id = harness
        .create_ok(
            &pod,
            &config,
            container_config("app", &harness.image, &["sleep", &marker]),
        )
        .await;
    harness.start_container(&id).await;
    // Until the init has exec'd `sleep` it is a fork of the shim with the
    // shim's command line: StartContainer, like `runc start`, returns once
    // it has let the init go, not once the exec is done.
    wait_for_process(&["sleep", &marker]).await;
    kill_shim_of(&id).await;
    assert_eq!(
        processes_with(&["sleep", &marker]).len(),
        1,
        "the container outlives its shim"
    );
    assert_eq!(
        harness.status(&id).await.state(),
        ContainerState::ContainerUnknown
    );

    harness.stop_container(&id, 10).await;
    assert!(
        processes_with(&["sleep", &marker]).is_empty(),
        "StopContainer answered OK while the container ran"
    );
    let status = harness.status(&id).await;
    assert_eq!(status.state(), ContainerState::ContainerExited);
    assert_eq!((status.exit_code, status.reason.as_str()), (255, "Unknown"));

    harness.remove_container(&id).await;
    for hierarchy in cgroup_hierarchies() {
        let cgroup = hierarchy
            .join(harness.parent("shimless").trim_start_matches('/'))
            .join(&id);
        assert!(!cgroup.exists(), "{} left", cgroup.display());
    }
    let listed = harness
        .client()
        .await
        .list_containers(ListContainersRequest {
            filter: Some(ContainerFilter {
                id: id.clone(),
                ..Default::default()
            }),
        })
        .await
        .expect("list")
        .into_inner()
        .containers;
    assert!(listed.is_empty());
    harness.remove_pod(&pod).await;
}

#[tokio::test]
async fn removing_an_image_keeps_the_layers_running_containers_use() {
    let harness = Harness::start().await;
    let (pod, config) = harness.run_pod("layers", NamespaceMode::Pod).await;
    let first = harness
        .create_ok(
            &pod,
            &config,
            container_config("first", &harness.image, &["sleep", "3600"]),
        )
        .await;
    harness.start_container(&first).await;
    let mut images = harness.berthd.image_client().await;
    let spec = ImageSpec {
        image: harness.image.clone(),
        ..Default::default()
    };
    images
        .remove_image(RemoveImageRequest {
            image: Some(spec.clone()),
        })
        .await
        .expect("RemoveImage");
    let exec = |id: String| {
        let harness = &harness;
        async move {
            harness
                .client()
                .await
                .exec_sync(ExecSyncRequest {
                    container_id: id,
                    cmd: vec!["cat".into(), "/etc/passwd".into()],
                    timeout: 10,
                })
                .await
                .expect("ExecSync")
                .into_inner()
        }
    };
    let answer = exec(first.clone()).await;
    assert_eq!(answer.exit_code, 0, "{answer:?}");
    assert!(String::from_utf8_lossy(&answer.stdout).contains("root"));

    images
        .pull_image(PullImageRequest {
            image: Some(spec.clone()),
            auth: None,
            sandbox_config: None,
        })
        .await
        .expect("PullImage again");
    let second = harness
        .create_ok(
            &pod,
            &config,
            container_config("second", &harness.image, &["sleep", "3600"]),
        )
        .await;
    harness.start_container(&second).await;
    assert_eq!(exec(second).await.exit_code, 0);

    // Once no container uses them, the layers go with the image.
    harness.remove_pod(&pod).await;
    images
        .remove_image(RemoveImageRequest { image: Some(spec) })
        .await
        .expect("RemoveImage");
    let layers = harness.berthd.sandbox.root().join("images/layers");
    let left: Vec<_> = std::fs::read_dir(&layers)
        .map(|entries| entries.flatten().map(|entry| entry.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
}
