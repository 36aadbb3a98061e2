//! Stats and events against a real berthd: a container that fills 64 MiB
//! of its pod's /dev/shm (charged to its cgroup, and not reclaimable, so
//! part of the working set) and then spins shows that memory and cpu time
//! in its stats and its pod's; and a container's lifecycle shows up on
//! `GetContainerEvents` as CREATED, STARTED, STOPPED, DELETED, in order,
//! with STOPPED also for a container that exits on its own; and a
//! container that writes and syncs 8 MiB shows them as block IO in its
//! pod's metrics where the host's cgroups count IO, and pressure where they
//! have it (cgroup v2; the real-node stage runs on one), with cadvisor's
//! other container metrics (processes, threads, open files, the layers'
//! filesystem, start time, cpu split, memory counters).
//!
//! Harness, image and clean-up as in tests/containers.rs (support/pods.rs).

use std::time::{Duration, Instant};

use berth_tests::pods::{container_config, Harness, SETTLE};
use cri_api::v1::{
    ContainerEventResponse, ContainerEventType, ContainerState, ContainerStats,
    ContainerStatsRequest, GetEventsRequest, ListContainerStatsRequest,
    ListPodSandboxMetricsRequest, Metric, NamespaceMode, PodSandboxStatsRequest,
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
    let id = harness.run_container(&pod, &pod_config, config).await;

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

/// The value of the first of `metrics` named `name`.
fn metric(metrics: &[Metric], name: &str) -> Option<u64> {
    metrics
        .iter()
        .find(|metric| metric.name == name)
        .and_then(|metric| metric.value.as_ref())
        .map(|value| value.value)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_writing_container_shows_its_block_io_and_pressure() {
    let harness = Harness::start().await;
    let (pod, pod_config) = harness.run_pod("block-io", NamespaceMode::Container).await;
    // fsync makes the writer itself submit the writes, so they are charged
    // to its cgroup on v1 too (where background writeback is not).
    let config = container_config(
        "writer",
        &harness.image,
        &[
            "sh",
            "-c",
            "dd if=/dev/zero of=/written bs=1048576 count=8 conv=fsync && sleep 3600",
        ],
    );
    let id = harness.create_ok(&pod, &pod_config, config).await;
    harness.start_container(&id).await;

    // cgroup v2 counts IO with the io controller, which berth's systemd
    // units ask for. cgroup v1's blkio.throttle.* counters may stay empty
    // (on Linux 6.18 without a throttle rule even the root's list no
    // device), and then berth has none to report.
    let v2 = std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    let v1_counts =
        std::fs::read_to_string("/sys/fs/cgroup/blkio/blkio.throttle.io_service_bytes_recursive")
            .is_ok_and(|text| text.lines().any(|line| line.contains(':')));
    let counted = v2 || v1_counts;
    let deadline = Instant::now() + SETTLE;
    let (pod_metrics, container) = loop {
        let pods = harness
            .client()
            .await
            .list_pod_sandbox_metrics(ListPodSandboxMetricsRequest {})
            .await
            .expect("ListPodSandboxMetrics")
            .into_inner()
            .pod_metrics;
        let pod_metrics = pods
            .into_iter()
            .find(|metrics| metrics.pod_sandbox_id == pod)
            .expect("the pod's metrics");
        let container = pod_metrics
            .container_metrics
            .iter()
            .find(|metrics| metrics.container_id == id)
            .expect("the container's metrics")
            .metrics
            .clone();
        let written: u64 = container
            .iter()
            .filter(|metric| metric.name == "container_fs_writes_bytes_total")
            .filter_map(|metric| metric.value.as_ref().map(|value| value.value))
            .sum();
        // Without accounting: the write is done once the layer holds it.
        let layer = metric(&container, "container_fs_usage_bytes").unwrap_or(0);
        if (counted && written >= 8 * MIB) || (!counted && layer >= 8 * MIB) {
            break (pod_metrics, container);
        }
        assert!(
            Instant::now() < deadline,
            "the container wrote {written} bytes (layer {layer}), not 8 MiB: {container:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let write = container
        .iter()
        .find(|metric| metric.name == "container_fs_writes_bytes_total");
    assert_eq!(write.is_some(), counted, "{container:?}");
    if let Some(write) = write {
        let device = &write.label_values[3];
        assert!(
            device.starts_with("/dev/") || device.contains(':'),
            "device label {device:?}"
        );
        assert!(
            metric(&container, "container_fs_writes_total").is_some_and(|ops| ops >= 1),
            "{container:?}"
        );
        // The pod's IO includes its container's.
        assert!(
            metric(&pod_metrics.metrics, "container_fs_writes_bytes_total")
                .is_some_and(|bytes| bytes >= 8 * MIB),
            "{:?}",
            pod_metrics.metrics
        );
    }

    // cadvisor's other container metrics, read from the container's cgroup
    // and /proc: what a sleeping shell pipeline must show.
    let value =
        |name: &str| metric(&container, name).unwrap_or_else(|| panic!("no {name}: {container:?}"));
    let processes = value("container_processes");
    assert!(processes >= 1, "{container:?}");
    assert!(value("container_threads") >= processes, "{container:?}");
    assert!(value("container_file_descriptors") >= 3, "{container:?}");
    assert!(value("container_fs_limit_bytes") >= value("container_fs_usage_bytes"));
    assert!(value("container_fs_inodes_free") <= value("container_fs_inodes_total"));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    let started = value("container_start_time_seconds");
    assert!(
        started <= now && now - started < 3600,
        "started {started}, now {now}"
    );
    assert!(value("container_last_seen") >= started);
    let usage = container
        .iter()
        .find(|metric| metric.name == "container_cpu_usage_seconds_total")
        .expect("cpu usage");
    assert_eq!(usage.label_values[3], "total");
    for name in [
        "container_cpu_user_seconds_total",
        "container_cpu_system_seconds_total",
        "container_memory_cache",
        "container_memory_failcnt",
        "container_spec_memory_limit_bytes",
        "container_threads_max",
    ] {
        value(name);
    }

    // Pressure is in the stats exactly where the container's cgroup has
    // pressure files: cgroup v2 (the real-node stage checks it there);
    // cgroup v1 has none.
    let stats = container_stats(&harness, &id).await;
    let cpu_psi = stats.cpu.as_ref().and_then(|cpu| cpu.psi.as_ref());
    let memory_psi = stats.memory.as_ref().and_then(|memory| memory.psi.as_ref());
    assert_eq!(cpu_psi.is_some(), v2, "{stats:?}");
    assert_eq!(memory_psi.is_some(), v2, "{stats:?}");
    assert_eq!(stats.io.is_some(), v2, "{stats:?}");
    assert_eq!(
        metric(&container, "container_pressure_io_waiting_seconds_total").is_some(),
        v2
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
    harness.stop_container(&id, 1).await;
    harness.remove_container(&id).await;

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
