//! Stats and events against a real berthd: a container that fills 64 MiB
//! of its pod's /dev/shm (charged to its cgroup, and not reclaimable, so
//! part of the working set) and then spins shows that memory and cpu time
//! in its stats and its pod's; and a container's lifecycle shows up on
//! `GetContainerEvents` as CREATED, STARTED, STOPPED, DELETED, in order,
//! with STOPPED also for a container that exits on its own.
//!
//! Harness, image and clean-up as in tests/containers.rs (support/pods.rs).

use std::time::{Duration, Instant};

use berth_tests::pods::{container_config, Harness, SETTLE};
use cri_api::v1::{
    ContainerEventResponse, ContainerEventType, ContainerState, ContainerStats,
    ContainerStatsRequest, GetEventsRequest, ListContainerStatsRequest, NamespaceMode,
    PodSandboxStatsRequest, RemoveContainerRequest, StopContainerRequest,
};
use tonic::Streaming;

const MIB: u64 = 1024 * 1024;

async fn container_stats(harness: &Harness, id: &str) -> ContainerStats {
    harness
        .client()
        .await
        .container_stats(ContainerStatsRequest {
            container_id: id.to_string(),
        })
        .await
        .unwrap_or_else(|status| panic!("ContainerStats {id}: {status:?}"))
        .into_inner()
        .stats
        .expect("stats")
}

fn value(value: &Option<cri_api::v1::UInt64Value>) -> u64 {
    value.as_ref().map(|value| value.value).expect("value set")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_busy_container_shows_its_memory_and_cpu() {
    let harness = Harness::start().await;
    let (pod, pod_config) = harness.run_pod("stats", NamespaceMode::Container).await;
    let config = container_config(
        "filler",
        &harness.image,
        &[
            "sh",
            "-c",
            "dd if=/dev/zero of=/dev/shm/fill bs=1048576 count=64 && echo filled && while :; do :; done",
        ],
    );
    let id = harness.create_ok(&pod, &pod_config, config).await;
    harness.start_container(&id).await;
    harness
        .wait_state(&id, ContainerState::ContainerRunning)
        .await;

    // Settle: the fill is done and the loop has used some cpu time.
    let deadline = Instant::now() + SETTLE;
    let stats = loop {
        let stats = container_stats(&harness, &id).await;
        let working_set = value(&stats.memory.as_ref().expect("memory").working_set_bytes);
        let cpu = value(&stats.cpu.as_ref().expect("cpu").usage_core_nano_seconds);
        if working_set >= 64 * MIB && cpu >= 500_000_000 {
            break stats;
        }
        assert!(
            Instant::now() < deadline,
            "working set {working_set} and cpu {cpu} ns did not reach 64 MiB and 0.5 s: {stats:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let attributes = stats.attributes.as_ref().expect("attributes");
    assert_eq!(attributes.id, id);
    assert_eq!(attributes.metadata.as_ref().unwrap().name, "filler");
    let memory = stats.memory.as_ref().unwrap();
    let working_set = value(&memory.working_set_bytes);
    assert!(
        working_set < 64 * MIB + 48 * MIB,
        "working set {working_set} is far above the 64 MiB filled: {memory:?}"
    );
    assert!(value(&memory.usage_bytes) >= working_set, "{memory:?}");
    assert!(memory.timestamp > 0);
    let layer = stats.writable_layer.as_ref().expect("writable layer");
    assert!(value(&layer.inodes_used) >= 1, "{layer:?}");

    // A later sample has a rate: the loop keeps (most of) a core busy, on
    // a machine with few cores shared with others. The window is a second
    // long: back-to-back samples a few ms apart may fall where a loaded
    // machine did not schedule the loop at all.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let later = container_stats(&harness, &id).await;
    let cpu = later.cpu.as_ref().unwrap();
    let nano_cores = value(&cpu.usage_nano_cores);
    assert!(
        (10_000_000..=4_000_000_000).contains(&nano_cores),
        "usage_nano_cores {nano_cores} out of range: {cpu:?}"
    );
    assert!(value(&cpu.usage_core_nano_seconds) >= 500_000_000);

    // Listing with a filter finds it; the pod's stats include it.
    let listed = harness
        .client()
        .await
        .list_container_stats(ListContainerStatsRequest {
            filter: Some(cri_api::v1::ContainerStatsFilter {
                pod_sandbox_id: pod.clone(),
                ..Default::default()
            }),
        })
        .await
        .expect("ListContainerStats")
        .into_inner()
        .stats;
    assert_eq!(listed.len(), 1);
    let pod_stats = harness
        .client()
        .await
        .pod_sandbox_stats(PodSandboxStatsRequest {
            pod_sandbox_id: pod.clone(),
        })
        .await
        .expect("PodSandboxStats")
        .into_inner()
        .stats
        .expect("pod stats");
    let linux = pod_stats.linux.expect("linux");
    assert_eq!(linux.containers.len(), 1);
    assert!(value(&linux.memory.expect("pod memory").working_set_bytes) >= 64 * MIB);
    assert!(value(&linux.process.expect("process").process_count) >= 1);
    let network = linux.network.expect("network");
    assert!(
        network.interfaces.iter().any(|iface| iface.name == "eth0"),
        "{network:?}"
    );

    harness.remove_pod(&pod).await;
}

/// The next event for `id`, skipping others (sandbox events).
async fn next_event_for(
    events: &mut Streaming<ContainerEventResponse>,
    id: &str,
) -> ContainerEventResponse {
    let deadline = Instant::now() + SETTLE;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let event = tokio::time::timeout(left, events.message())
            .await
            .unwrap_or_else(|_| panic!("no event for {id} within {SETTLE:?}"))
            .expect("event stream")
            .expect("stream open");
        if event.container_id == id {
            return event;
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn lifecycle_events_arrive_in_order() {
    let harness = Harness::start().await;
    let mut events = harness
        .client()
        .await
        .get_container_events(GetEventsRequest {})
        .await
        .expect("GetContainerEvents")
        .into_inner();
    let (pod, pod_config) = harness.run_pod("events", NamespaceMode::Container).await;

    let id = harness
        .create_ok(
            &pod,
            &pod_config,
            container_config("sleeper", &harness.image, &["sleep", "1000"]),
        )
        .await;
    harness.start_container(&id).await;
    harness
        .client()
        .await
        .stop_container(StopContainerRequest {
            container_id: id.clone(),
            timeout: 1,
        })
        .await
        .expect("StopContainer");
    harness
        .client()
        .await
        .remove_container(RemoveContainerRequest {
            container_id: id.clone(),
        })
        .await
        .expect("RemoveContainer");

    let mut kinds = Vec::new();
    for _ in 0..4 {
        let event = next_event_for(&mut events, &id).await;
        let status = event
            .pod_sandbox_status
            .as_ref()
            .expect("pod sandbox status");
        assert_eq!(status.id, pod);
        assert!(event.created_at > 0);
        kinds.push(event.container_event_type());
        if event.container_event_type() == ContainerEventType::ContainerStartedEvent {
            assert!(
                event
                    .containers_statuses
                    .iter()
                    .any(|status| status.id == id),
                "the container's own status is in the event: {event:?}"
            );
        }
    }
    assert_eq!(
        kinds,
        [
            ContainerEventType::ContainerCreatedEvent,
            ContainerEventType::ContainerStartedEvent,
            ContainerEventType::ContainerStoppedEvent,
            ContainerEventType::ContainerDeletedEvent,
        ]
    );

    // A container that exits on its own: STOPPED without StopContainer.
    let quick = harness
        .create_ok(
            &pod,
            &pod_config,
            container_config("quick", &harness.image, &["true"]),
        )
        .await;
    harness.start_container(&quick).await;
    assert_eq!(
        next_event_for(&mut events, &quick)
            .await
            .container_event_type(),
        ContainerEventType::ContainerCreatedEvent
    );
    assert_eq!(
        next_event_for(&mut events, &quick)
            .await
            .container_event_type(),
        ContainerEventType::ContainerStartedEvent
    );
    let stopped = next_event_for(&mut events, &quick).await;
    assert_eq!(
        stopped.container_event_type(),
        ContainerEventType::ContainerStoppedEvent
    );
    let own = stopped
        .containers_statuses
        .iter()
        .find(|status| status.id == quick)
        .expect("own status");
    assert_eq!(own.state(), ContainerState::ContainerExited);

    harness.remove_pod(&pod).await;
}
