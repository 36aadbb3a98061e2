//! The pod layer's rules through the fakes of both managers (no root): a
//! pod stop stops every container before the sandbox, events come in
//! lifecycle order, a restore failing at its third container leaves
//! nothing, a remove whose teardown fails is finished by the next.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use cri_api::v1::{
    ContainerConfig, LinuxPodSandboxConfig, LinuxSandboxSecurityContext, NamespaceMode,
    NamespaceOption, PodSandboxConfig,
};

use super::{Lifecycle, PodError, PodEvents, Pods};
use crate::container::lifecycle_tests::{
    assert_no_trace, container, fixture, fixture_sharing_journal, Fixture,
};
use crate::container::ContainerManager;
use crate::pod_checkpoint::{CheckpointPod, RestorePod};
use crate::sandbox::lifecycle_tests::{assert_no_trace as assert_no_pod_trace, pod};
use crate::sandbox::store::SandboxState;

/// The events the layer emitted: `(id, sandbox id, move)`, in order.
#[derive(Default)]
pub(crate) struct Recorder(Mutex<Vec<(String, String, Lifecycle)>>);

impl Recorder {
    pub(crate) fn new() -> Arc<Self> {
        Arc::default()
    }

    fn events(&self) -> Vec<(String, String, Lifecycle)> {
        self.0.lock().expect("lock").clone()
    }
}

#[async_trait]
impl PodEvents for Recorder {
    async fn emit(&self, id: &str, sandbox_id: &str, what: Lifecycle) {
        self.0
            .lock()
            .expect("lock")
            .push((id.to_string(), sandbox_id.to_string(), what));
    }
}

/// The pod layer over the fixture's managers, telling `events`.
pub(crate) fn pods_over(containers: &Arc<ContainerManager>, events: Arc<Recorder>) -> Pods {
    Pods::new(containers.sandboxes.clone(), containers.clone(), events)
}

/// Pod "web" with containers "a" and "b", both running.
async fn running_pod(f: &Fixture) -> (String, Vec<String>) {
    let pod_id = f.pod("web", "").await;
    let mut ids = Vec::new();
    for name in ["a", "b"] {
        let id = f.create_ok(&pod_id, container(name)).await;
        f.manager.start(&id).await.expect("start");
        ids.push(id);
    }
    (pod_id, ids)
}

/// `events` are a move of each of `containers` (any order), then the pod's.
fn containers_then_pod(
    events: &[(String, String, Lifecycle)],
    pod_id: &str,
    containers: &[String],
    what: Lifecycle,
) {
    let n = containers.len();
    assert_eq!(events.len(), n + 1, "{events:?}");
    let mut seen: Vec<&str> = events[..n].iter().map(|(id, _, _)| id.as_str()).collect();
    seen.sort();
    let mut want: Vec<&str> = containers.iter().map(String::as_str).collect();
    want.sort();
    assert_eq!(seen, want, "the containers first: {events:?}");
    assert_eq!(
        events[n],
        (pod_id.to_string(), pod_id.to_string(), what),
        "the pod last: {events:?}"
    );
    for (_, sandbox_id, kind) in events {
        assert_eq!((sandbox_id.as_str(), *kind), (pod_id, what), "{events:?}");
    }
}

#[tokio::test]
async fn a_pod_stop_stops_every_container_before_the_sandbox() {
    let f = fixture_sharing_journal().await;
    let (pod_id, _) = running_pod(&f).await;
    let pods = pods_over(&f.manager, Recorder::new());
    f.journal.clear();
    pods.stop(&pod_id).await.expect("stop");
    assert_eq!(
        f.journal.entries(),
        [
            "kill Number(9) all=true",
            "kill Number(9) all=true",
            "cni del",
            "kill infra"
        ],
        "each container killed, then the pod's network and infra process"
    );
}

#[tokio::test]
async fn stop_and_remove_events_come_in_lifecycle_order() {
    let f = fixture().await;
    let (pod_id, ids) = running_pod(&f).await;
    let events = Recorder::new();
    let pods = pods_over(&f.manager, events.clone());
    pods.stop(&pod_id).await.expect("stop");
    containers_then_pod(&events.events(), &pod_id, &ids, Lifecycle::Stopped);
    let events = Recorder::new();
    let pods = pods_over(&f.manager, events.clone());
    pods.remove(&pod_id).await.expect("remove");
    containers_then_pod(&events.events(), &pod_id, &ids, Lifecycle::Removed);
    assert_no_trace(&f, "removed");
    assert_no_pod_trace(&f.pods, "removed");
}

#[tokio::test]
async fn a_remove_of_a_running_pod_removes_its_containers_first() {
    let f = fixture_sharing_journal().await;
    let (pod_id, ids) = running_pod(&f).await;
    let events = Recorder::new();
    let pods = pods_over(&f.manager, events.clone());
    f.journal.clear();
    pods.remove(&pod_id).await.expect("remove");
    let entries = f.journal.entries();
    let containers: Vec<usize> = (0..entries.len())
        .filter(|&i| ["shutdown shim", "unmount rootfs"].contains(&entries[i].as_str()))
        .collect();
    assert_eq!(containers.len(), 4, "two shims, two rootfs: {entries:?}");
    let del = entries
        .iter()
        .position(|entry| entry == "cni del")
        .expect("the pod's teardown");
    assert!(
        containers.iter().all(|&i| i < del),
        "the containers' teardown before the pod's: {entries:?}"
    );
    containers_then_pod(&events.events(), &pod_id, &ids, Lifecycle::Removed);
    assert_no_trace(&f, "removed");
    assert_no_pod_trace(&f.pods, "removed");
}

#[tokio::test]
async fn a_remove_whose_teardown_fails_keeps_the_pod_until_the_next() {
    let f = fixture().await;
    let (pod_id, ids) = running_pod(&f).await;
    let events = Recorder::new();
    let pods = pods_over(&f.manager, events.clone());
    f.pods.journal.fail("cni del");
    let err = pods.remove(&pod_id).await.expect_err("the DEL fails");
    assert!(matches!(err, PodError::Sandbox(_)), "{err}");
    let listed: Vec<_> = f
        .pods
        .manager
        .store
        .published_all()
        .into_iter()
        .map(|record| (record.id.clone(), record.state))
        .collect();
    assert_eq!(listed, [(pod_id.clone(), SandboxState::NotReady)]);
    assert_no_trace(&f, "the containers went");
    let so_far = events.events();
    assert!(
        so_far.iter().all(|(id, _, _)| id != &pod_id),
        "no DELETED for a pod still there: {so_far:?}"
    );
    f.pods.journal.heal();
    pods.remove(&pod_id).await.expect("the next remove");
    assert_no_pod_trace(&f.pods, "finished");
    let all = events.events();
    containers_then_pod(&all, &pod_id, &ids, Lifecycle::Removed);
}

/// A pod whose containers each have their PID namespace (no infra
/// process, which the fakes cannot keep alive for a checkpoint).
pub(crate) fn checkpointable_pod() -> PodSandboxConfig {
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

pub(crate) fn three() -> Vec<ContainerConfig> {
    ["one", "two", "three"].map(container).to_vec()
}

/// A checkpoint of a pod of three running containers, in `<dir>/out`; the
/// pod itself removed again.
pub(crate) async fn checkpoint_of_three(f: &Fixture, pods: &Pods) -> String {
    let pod_id = f
        .pods
        .manager
        .run(checkpointable_pod(), "")
        .await
        .expect("pod");
    let mut ids = Vec::new();
    for config in three() {
        let id = f.create_ok(&pod_id, config).await;
        f.manager.start(&id).await.expect("start");
        // What it wrote (the fake mount makes no overlay).
        let record = f.manager.get(&id).await.expect("record");
        std::fs::create_dir_all(record.layer_dir.join("upper/data")).expect("upper");
        ids.push(id);
    }
    let out = f.dir.path().join("out");
    std::fs::create_dir(&out).expect("out");
    let out = out.to_string_lossy().into_owned();
    let none = HashMap::new();
    pods.checkpoint(CheckpointPod {
        pod_sandbox_id: &pod_id,
        output_path: &out,
        container_ids: &ids,
        options: &none,
        timeout: std::time::Duration::ZERO,
    })
    .await
    .expect("checkpoint");
    pods.remove(&pod_id).await.expect("remove");
    out
}

#[tokio::test]
async fn a_restore_failing_at_its_third_container_leaves_nothing() {
    let f = fixture().await;
    let events = Recorder::new();
    let pods = pods_over(&f.manager, events.clone());
    let out = checkpoint_of_three(&f, &pods).await;
    assert_no_trace(&f, "before");
    assert_no_pod_trace(&f.pods, "before");
    let before = events.events().len();
    let config = checkpointable_pod();
    let containers = three();
    let none = HashMap::new();
    let request = || RestorePod {
        checkpoint_path: &out,
        config: &config,
        runtime_handler: "",
        options: &none,
        container_configs: &containers,
    };
    f.journal.fail_after("launch shim", 2);
    let err = pods.restore(request()).await.expect_err("the third fails");
    assert!(
        err.to_string().contains("restoring container three"),
        "{err}"
    );
    assert_no_trace(&f, "no container, rootfs or shim left");
    assert_no_pod_trace(&f.pods, "no pod, cgroup, mount or lease left");
    assert_eq!(events.events().len(), before, "no events for what went");

    // Nothing held: the same restore succeeds, with the pod's events
    // before its containers'.
    f.journal.heal();
    let restored = pods.restore(request()).await.expect("restore");
    let pod_id = restored.pod_sandbox_id.clone();
    let mut want = vec![
        (pod_id.clone(), pod_id.clone(), Lifecycle::Created),
        (pod_id.clone(), pod_id.clone(), Lifecycle::Started),
    ];
    for (_, id) in &restored.containers {
        want.push((id.clone(), pod_id.clone(), Lifecycle::Created));
    }
    assert_eq!(events.events()[before..].to_vec(), want);
}

/// A cgroup's stats with `cpu_ns` of cpu and `pids` processes.
fn usage(cpu_ns: u64, pids: u64) -> berth_cgroups::stats::CgroupStats {
    berth_cgroups::stats::CgroupStats {
        cpu: Some(berth_cgroups::stats::CpuStats { usage_ns: cpu_ns }),
        pids: Some(berth_cgroups::stats::PidsStats { current: pids }),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_pods_usage_is_its_cgroups_summed() {
    let f = fixture().await;
    let (pod_id, _) = running_pod(&f).await;
    let pods = pods_over(&f.manager, Recorder::new());
    let record = f.pods.manager.published(&pod_id).expect("pod");
    // The fake's sandbox cgroup has no stats files: the containers' only.
    let read = |containers| {
        crate::pod::cgroup_reading(
            &f.pods.manager,
            f.manager.cgroups.clone(),
            &record,
            containers,
        )
    };
    let reading = read(vec![usage(1_000, 2), usage(500, 3)]).await;
    let stats = reading.stats.expect("summed");
    assert_eq!(stats.cpu.map(|cpu| cpu.usage_ns), Some(1_500));
    assert_eq!(stats.pids.map(|pids| pids.current), Some(5));
    assert!(stats.pressure.is_none(), "the default parent is shared");
    assert!(read(Vec::new()).await.stats.is_none());
    pods.stop(&pod_id).await.expect("stop");
    let record = f.pods.manager.published(&pod_id).expect("pod");
    assert!(
        crate::pod::network(&record).await.is_none(),
        "no network when stopped"
    );
}
