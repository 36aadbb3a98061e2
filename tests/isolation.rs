//! A stalled shim is its own container's problem only: with one shim
//! SIGSTOPped, the other pod's status, the lists and the stats answer, and
//! so does the stalled container's own status, running as last known (not
//! unknown, which kubelet would answer with a kill and a restart); also
//! right after a berthd restart, when berthd has no state of the stalled
//! container kept and answers from its record.

use std::future::Future;
use std::time::Duration;

use berth_tests::host::processes_with;
use berth_tests::pods::{container_config, Harness};
use cri_api::v1::*;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Generous, and well under berthd's 30 s bound on a shim call, which a
/// call that waited on the stopped shim would run into.
const ANSWERED_WITHIN: Duration = Duration::from_secs(15);

/// SIGCONT on drop: a failed test must not leave the shim stopped.
struct Stopped(i32);

impl Stopped {
    fn shim_of(id: &str) -> Self {
        let shims = processes_with(&["berth-shim", id]);
        assert_eq!(shims.len(), 1, "shims of {id}: {shims:?}");
        kill(Pid::from_raw(shims[0]), Signal::SIGSTOP).expect("SIGSTOP");
        Self(shims[0])
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = kill(Pid::from_raw(self.0), Signal::SIGCONT);
    }
}

async fn answered<T>(what: &str, call: impl Future<Output = T>) -> T {
    tokio::time::timeout(ANSWERED_WITHIN, call)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {ANSWERED_WITHIN:?}"))
}

/// Every call kubelet keeps making, with `stalled`'s shim stopped.
async fn the_node_answers(harness: &Harness, stalled: &str, other: &str) {
    let mut client = harness.client().await;
    let status = answered(
        "the other container's status",
        client.container_status(ContainerStatusRequest {
            container_id: other.to_string(),
            verbose: false,
        }),
    )
    .await
    .expect("ContainerStatus of the other container")
    .into_inner()
    .status
    .expect("status");
    assert_eq!(status.state, ContainerState::ContainerRunning as i32);

    let listed = answered(
        "ListContainers",
        client.list_containers(ListContainersRequest { filter: None }),
    )
    .await
    .expect("ListContainers")
    .into_inner()
    .containers;
    for id in [stalled, other] {
        let found = listed.iter().find(|c| c.id == id);
        assert_eq!(
            found.map(|c| c.state),
            Some(ContainerState::ContainerRunning as i32),
            "{id} not listed running: {listed:?}"
        );
    }

    let stats = answered(
        "ListContainerStats",
        client.list_container_stats(ListContainerStatsRequest { filter: None }),
    )
    .await
    .expect("ListContainerStats")
    .into_inner()
    .stats;
    assert_eq!(stats.len(), 2, "{stats:?}");
    let pods = answered(
        "ListPodSandboxStats",
        client.list_pod_sandbox_stats(ListPodSandboxStatsRequest { filter: None }),
    )
    .await
    .expect("ListPodSandboxStats")
    .into_inner()
    .stats;
    assert_eq!(pods.len(), 2, "{pods:?}");

    // The stalled container's own status answers too, with the state it
    // was last known in and when it started.
    let own = answered(
        "the stalled container's own status",
        client.container_status(ContainerStatusRequest {
            container_id: stalled.to_string(),
            verbose: false,
        }),
    )
    .await
    .expect("ContainerStatus of the stalled container")
    .into_inner()
    .status
    .expect("status");
    assert_eq!(
        ContainerState::try_from(own.state),
        Ok(ContainerState::ContainerRunning),
        "{own:?}"
    );
    assert!(own.started_at > 0, "{own:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stopped_shim_stalls_no_other_pod() {
    let mut harness = Harness::start().await;
    let image = harness.image.clone();
    let mut ids = Vec::new();
    for name in ["stalled", "other"] {
        let (pod, pod_cfg) = harness.run_pod(name, NamespaceMode::Pod).await;
        let id = harness
            .create_ok(
                &pod,
                &pod_cfg,
                container_config("work", &image, &["sleep", "3600"]),
            )
            .await;
        harness.start_container(&id).await;
        harness
            .wait_state(&id, ContainerState::ContainerRunning)
            .await;
        ids.push((pod, id));
    }
    let (stalled, other) = (ids[0].1.clone(), ids[1].1.clone());

    let stopped = Stopped::shim_of(&stalled);
    the_node_answers(&harness, &stalled, &other).await;

    // A restarted berthd has no state kept: it must not wait on the
    // stopped shim for the others either.
    harness
        .berthd
        .restart_on_same_dirs(Signal::SIGKILL, Duration::ZERO);
    the_node_answers(&harness, &stalled, &other).await;

    drop(stopped);
    for (pod, _) in &ids {
        harness.remove_pod(pod).await;
    }
}
