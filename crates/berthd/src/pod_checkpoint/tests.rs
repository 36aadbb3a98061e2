//! Pod checkpoint and restore through the fakes of the container
//! lifecycle (no root, no CRIU): what lands in the caller's directory,
//! the checks before any side effect, and that a failure at the second
//! container leaves nothing behind.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use berth_shim_api::protocol::RunState;
use cri_api::v1::{
    ContainerConfig, LinuxPodSandboxConfig, LinuxSandboxSecurityContext, NamespaceMode,
    NamespaceOption, PodSandboxConfig,
};

use super::*;
use crate::container::lifecycle_tests::{assert_no_trace, container, fixture, Fixture};
use crate::sandbox::lifecycle_tests::pod;

/// A pod whose containers each have their PID namespace (no infra
/// process, which the fakes cannot keep alive): ready as run.
fn pod_config() -> PodSandboxConfig {
    let mut config = pod("ckpt");
    config.linux = Some(LinuxPodSandboxConfig {
        security_context: Some(LinuxSandboxSecurityContext {
            namespace_options: Some(NamespaceOption {
                pid: NamespaceMode::Container as i32,
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    config
}

fn configs() -> Vec<ContainerConfig> {
    vec![container("counter"), container("web")]
}

/// The pod and its two running containers.
async fn running_pod(f: &Fixture) -> (String, Vec<String>) {
    let pod_id = f.pods.manager.run(pod_config(), "").await.expect("pod");
    let mut ids = Vec::new();
    for config in configs() {
        let id = f
            .manager
            .create(&pod_id, config, None)
            .await
            .expect("create");
        f.manager.start(&id).await.expect("start");
        // What it wrote (the fake mount makes no overlay).
        let record = f.manager.get(&id).await.expect("record");
        std::fs::create_dir_all(record.layer_dir.join("upper/data")).expect("upper");
        std::fs::write(record.layer_dir.join("upper/data/count"), "41").expect("file");
        ids.push(id);
    }
    (pod_id, ids)
}

fn request<'a>(
    pod: &'a str,
    output: &'a str,
    ids: &'a [String],
    options: &'a HashMap<String, String>,
) -> CheckpointPod<'a> {
    CheckpointPod {
        pod_sandbox_id: pod,
        output_path: output,
        container_ids: ids,
        options,
        timeout: Duration::ZERO,
    }
}

/// RestorePod as the pod layer runs it.
async fn restore(
    containers: &std::sync::Arc<crate::container::ContainerManager>,
    request: RestorePod<'_>,
) -> Result<Restored, PodCheckpointError> {
    crate::pod::tests::pods_over(containers, crate::pod::tests::Recorder::new())
        .restore(request)
        .await
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

async fn state(f: &Fixture, id: &str) -> Option<RunState> {
    let record = f.manager.get(id).await.expect("record");
    f.manager.state(&record).await.map(|s| s.status)
}

fn out_dir(f: &Fixture, name: &str) -> String {
    let dir = f.dir.path().join(name);
    std::fs::create_dir(&dir).expect("out dir");
    dir.to_string_lossy().into_owned()
}

#[tokio::test]
async fn a_pod_checkpoint_holds_each_container_and_the_pod_config() {
    let f = fixture().await;
    let (pod_id, ids) = running_pod(&f).await;
    let out = out_dir(&f, "out");
    let none = HashMap::new();
    checkpoint(&f.manager, request(&pod_id, &out, &ids, &none))
        .await
        .expect("checkpoint");
    assert_eq!(
        names_in(Path::new(&out)),
        ["checkpoint-manifest.json", "containers", "pod-config.pb"]
    );
    let (manifest, config) = manifest::read(Path::new(&out)).expect("a checkpoint");
    assert_eq!(manifest.sandbox_id, pod_id);
    assert_eq!(config.hostname, "ckpt");
    let named: Vec<(&str, &str)> = manifest
        .containers
        .iter()
        .map(|c| (c.name.as_str(), c.id.as_str()))
        .collect();
    assert_eq!(
        named,
        [("counter", ids[0].as_str()), ("web", ids[1].as_str())]
    );
    for entry in &manifest.containers {
        let archive = Path::new(&out).join(&entry.archive);
        let config = crate::container::checkpoint_archive::read_config_dump(&archive)
            .expect("a container archive");
        assert_eq!(config.id, entry.id);
        assert_eq!(entry.config.command, ["sh"]);
    }
    for id in &ids {
        assert_eq!(state(&f, id).await, Some(RunState::Running), "runs on");
    }
}

#[tokio::test]
async fn a_dump_failing_at_the_second_container_leaves_nothing() {
    let f = fixture().await;
    let (pod_id, ids) = running_pod(&f).await;
    let out = out_dir(&f, "out");
    f.journal.fail_after("criu dump", 1);
    let none = HashMap::new();
    let err = checkpoint(&f.manager, request(&pod_id, &out, &ids, &none))
        .await
        .expect_err("the second dump fails");
    let text = err.to_string();
    assert!(
        matches!(err, PodCheckpointError::Container { .. }) && text.contains(&ids[1]),
        "{text}"
    );
    assert!(text.contains("Error (criu/cr-dump.c:1)"), "{text}");
    assert!(
        names_in(Path::new(&out)).is_empty(),
        "no half-written checkpoint"
    );
    for id in &ids {
        assert_eq!(state(&f, id).await, Some(RunState::Running), "runs on");
    }
}

#[tokio::test]
async fn every_check_comes_before_any_dump() {
    let f = fixture().await;
    let (pod_id, ids) = running_pod(&f).await;
    let out = out_dir(&f, "out");
    let none = HashMap::new();
    let check = |err: PodCheckpointError, want: &str| {
        let text = err.to_string();
        assert!(text.contains(want), "want {want:?} in {text:?}");
        err
    };
    let err = checkpoint(&f.manager, request("nope", &out, &ids, &none)).await;
    assert!(matches!(
        check(err.expect_err("unknown"), "\"nope\""),
        PodCheckpointError::PodNotFound { .. }
    ));
    for bad in ["relative/dir", "/nonexistent/dir"] {
        let err = checkpoint(&f.manager, request(&pod_id, bad, &ids, &none)).await;
        check(err.expect_err("bad path"), "output_path");
    }
    let full = out_dir(&f, "full");
    std::fs::write(Path::new(&full).join("x"), "").expect("file");
    let err = checkpoint(&f.manager, request(&pod_id, &full, &ids, &none)).await;
    check(err.expect_err("not empty"), "not empty");
    let twice = vec![ids[0].clone(), ids[0].clone()];
    let err = checkpoint(&f.manager, request(&pod_id, &out, &twice, &none)).await;
    check(err.expect_err("twice"), "container_ids[1]");
    let err = checkpoint(&f.manager, request(&pod_id, &out, &[], &none)).await;
    check(err.expect_err("none"), "container_ids");
    let options = HashMap::from([("leaveRunning".to_string(), "true".to_string())]);
    let err = checkpoint(&f.manager, request(&pod_id, &out, &ids, &options)).await;
    check(err.expect_err("options"), "options[\"leaveRunning\"]");

    // A container of another pod, and one not running.
    let mut other = pod_config();
    other.metadata.as_mut().expect("metadata").name = "other".into();
    other.metadata.as_mut().expect("metadata").uid = "uid-other".into();
    let other = f.pods.manager.run(other, "").await.expect("other pod");
    let stranger = f
        .manager
        .create(&other, container("stranger"), None)
        .await
        .expect("create");
    let mixed = vec![ids[0].clone(), stranger.clone()];
    let err = checkpoint(&f.manager, request(&pod_id, &out, &mixed, &none)).await;
    assert!(matches!(
        check(err.expect_err("other pod"), &stranger),
        PodCheckpointError::NotInPod { .. }
    ));
    let idle = f
        .manager
        .create(&pod_id, container("idle"), None)
        .await
        .expect("create");
    let with_idle = vec![ids[0].clone(), idle.clone()];
    let err = checkpoint(&f.manager, request(&pod_id, &out, &with_idle, &none)).await;
    assert!(matches!(
        check(err.expect_err("not running"), &idle),
        PodCheckpointError::ContainerNotRunning { .. }
    ));

    // Without CRIU: refused naming it.
    f.journal.fail("criu check");
    let err = checkpoint(&f.manager, request(&pod_id, &out, &ids, &none)).await;
    assert!(matches!(
        check(err.expect_err("no CRIU"), "CRIU cannot run on this node"),
        PodCheckpointError::CriuUnavailable { .. }
    ));
    assert!(
        !f.journal.entries().iter().any(|e| e == "criu dump"),
        "nothing was dumped: {:?}",
        f.journal.entries()
    );
    assert!(names_in(Path::new(&out)).is_empty());

    // A stopped pod is not ready.
    f.pods.manager.stop(&pod_id).await.expect("stop");
    let err = checkpoint(&f.manager, request(&pod_id, &out, &ids, &none)).await;
    assert!(matches!(
        err.expect_err("stopped"),
        PodCheckpointError::PodNotReady { .. }
    ));
}

/// A checkpoint of the running pod, then the pod removed: the directory.
async fn checkpointed(f: &Fixture) -> (String, Vec<String>) {
    let (pod_id, ids) = running_pod(f).await;
    let out = out_dir(f, "out");
    let none = HashMap::new();
    checkpoint(&f.manager, request(&pod_id, &out, &ids, &none))
        .await
        .expect("checkpoint");
    for id in &ids {
        f.manager.remove(id).await.expect("remove container");
    }
    f.pods.manager.remove(&pod_id).await.expect("remove pod");
    (out, ids)
}

fn restore_request<'a>(
    path: &'a str,
    config: &'a PodSandboxConfig,
    containers: &'a [ContainerConfig],
    options: &'a HashMap<String, String>,
) -> RestorePod<'a> {
    RestorePod {
        checkpoint_path: path,
        config,
        runtime_handler: "",
        options,
        container_configs: containers,
    }
}

#[tokio::test]
async fn a_restored_pod_has_its_containers_created_from_their_archives() {
    let f = fixture().await;
    let (out, old_ids) = checkpointed(&f).await;
    let config = pod_config();
    let containers = configs();
    let none = HashMap::new();
    let restored = restore(
        &f.manager,
        restore_request(&out, &config, &containers, &none),
    )
    .await
    .expect("restore");
    let pod = f
        .pods
        .manager
        .get(&restored.pod_sandbox_id)
        .expect("the new pod");
    assert_eq!(
        pod.lock().await.effective_state(),
        crate::sandbox::store::SandboxState::Ready
    );
    let names: Vec<&str> = restored
        .containers
        .iter()
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(names, ["counter", "web"]);
    let (manifest, _) = manifest::read(Path::new(&out)).expect("untouched");
    for ((name, id), old) in restored.containers.iter().zip(&old_ids) {
        assert_ne!(id, old, "a new container");
        let record = f.manager.get(id).await.expect("record");
        assert_eq!(record.sandbox_id, restored.pod_sandbox_id);
        let entry = manifest
            .containers
            .iter()
            .find(|c| &c.name == name)
            .expect("entry");
        assert_eq!(
            record.restore_from.as_deref(),
            Some(Path::new(&out).join(&entry.archive).as_path()),
            "{name} restores from its archive"
        );
        assert_eq!(
            record.config.image.as_ref().map(|i| i.image.as_str()),
            Some(crate::container::lifecycle_tests::IMAGE),
            "made from the checkpoint's image"
        );
        assert_eq!(state(&f, id).await, Some(RunState::Created), "not started");
    }
}

#[tokio::test]
async fn a_restore_failing_at_the_second_container_leaves_nothing() {
    let f = fixture().await;
    let (out, _) = checkpointed(&f).await;
    assert!(f.pods.manager.store.all().is_empty());
    assert_no_trace(&f, "before");
    let config = pod_config();
    let containers = configs();
    let none = HashMap::new();
    f.journal.fail_after("launch shim", 1);
    let err = restore(
        &f.manager,
        restore_request(&out, &config, &containers, &none),
    )
    .await
    .expect_err("the second create fails");
    let text = err.to_string();
    assert!(text.contains("restoring container web"), "{text}");
    assert!(f.pods.manager.store.all().is_empty(), "no pod left");
    assert_no_trace(&f, "no container left");
    // Nothing held: the same restore now succeeds.
    f.journal.heal();
    let restored = restore(
        &f.manager,
        restore_request(&out, &config, &containers, &none),
    )
    .await
    .expect("restore");
    assert_eq!(restored.containers.len(), 2);
}

#[tokio::test]
async fn a_restore_must_describe_the_checkpoint_and_makes_nothing_otherwise() {
    let f = fixture().await;
    let (out, _) = checkpointed(&f).await;
    let config = pod_config();
    let none = HashMap::new();
    let fails = |containers: Vec<ContainerConfig>, want: &'static str| {
        let (f, out, config, none) = (&f, &out, &config, &none);
        async move {
            let err = restore(&f.manager, restore_request(out, config, &containers, none))
                .await
                .expect_err(want);
            assert!(
                matches!(
                    err,
                    PodCheckpointError::Invalid { .. } | PodCheckpointError::NotACheckpoint(_)
                ),
                "{err}"
            );
            assert!(err.to_string().contains(want), "want {want:?} in {err}");
        }
    };
    fails(vec![container("counter")], "\"web\"").await;
    fails(
        vec![container("counter"), container("web"), container("extra")],
        "\"extra\"",
    )
    .await;
    let mut changed = configs();
    changed[1].command = vec!["ls".into()];
    fails(changed, "container_configs[1].command").await;
    let mut twice = configs();
    twice[1] = container("counter");
    fails(twice, "container_configs[1].metadata.name").await;

    let mut renamed = pod_config();
    renamed.hostname = "elsewhere".into();
    let containers = configs();
    let err = restore(
        &f.manager,
        restore_request(&out, &renamed, &containers, &none),
    )
    .await
    .expect_err("hostname");
    assert!(err.to_string().contains("config.hostname"), "{err}");

    let err = restore(
        &f.manager,
        restore_request("ckpt", &config, &containers, &none),
    )
    .await
    .expect_err("relative");
    assert!(err.to_string().contains("checkpoint_path"), "{err}");

    // An archive changed after the checkpoint.
    let (manifest, _) = manifest::read(Path::new(&out)).expect("read");
    let archive = Path::new(&out).join(&manifest.containers[1].archive);
    let mut bytes = std::fs::read(&archive).expect("archive");
    bytes.push(0);
    std::fs::write(&archive, bytes).expect("tamper");
    fails(configs(), "has changed since the checkpoint").await;

    assert!(f.pods.manager.store.all().is_empty(), "nothing made");
    assert_no_trace(&f, "nothing made");
}

#[tokio::test]
async fn restore_without_criu_is_refused_naming_it() {
    let f = fixture().await;
    let (out, _) = checkpointed(&f).await;
    f.journal.fail("criu check");
    // the probe is kept: a fresh manager state would probe again
    *f.manager.criu_check.lock().await = None;
    let config = pod_config();
    let containers = configs();
    let none = HashMap::new();
    let err = restore(
        &f.manager,
        restore_request(&out, &config, &containers, &none),
    )
    .await
    .expect_err("no CRIU");
    assert!(
        matches!(err, PodCheckpointError::CriuUnavailable { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("CRIU cannot run"), "{err}");
    assert!(f.pods.manager.store.all().is_empty(), "nothing made");
}
