//! StopPodSandbox and RemovePodSandbox through their handlers over the
//! fakes: the request checked, the pod layer called, its moves turned
//! into CRI events in lifecycle order.

use cri_api::v1::{
    ContainerEventResponse, ContainerEventType, ContainerState, PodSandboxState,
    RemovePodSandboxRequest, StopPodSandboxRequest,
};
use tokio::sync::broadcast;
use tonic::Code;

use super::fake_service::service;
use super::CriService;
use crate::container::lifecycle_tests::{container, fixture, Fixture};

/// Pod "web" with containers "a" and "b" running, the service's events
/// seeded as at start-up, and a subscriber to what follows.
async fn running_pod(
    f: &Fixture,
) -> (
    CriService,
    String,
    Vec<String>,
    broadcast::Receiver<ContainerEventResponse>,
) {
    let pod_id = f.pod("web", "").await;
    let mut ids = Vec::new();
    for name in ["a", "b"] {
        let id = f.create_ok(&pod_id, container(name)).await;
        f.manager.start(&id).await.expect("start");
        ids.push(id);
    }
    let service = service(f);
    let (_exits, exits) = tokio::sync::mpsc::unbounded_channel();
    service.start_events(exits).await;
    let events = service.context().events.subscribe();
    (service, pod_id, ids, events)
}

/// The events sent so far: `(id, kind)`, and the last one whole.
fn drain(
    events: &mut broadcast::Receiver<ContainerEventResponse>,
) -> (Vec<(String, i32)>, Option<ContainerEventResponse>) {
    let mut seen = Vec::new();
    let mut last = None;
    while let Ok(event) = events.try_recv() {
        seen.push((event.container_id.clone(), event.container_event_type));
        last = Some(event);
    }
    (seen, last)
}

fn kinds(seen: &[(String, i32)], of: &[String]) -> Vec<(String, i32)> {
    seen.iter()
        .filter(|(id, _)| of.contains(id))
        .cloned()
        .collect()
}

#[tokio::test]
async fn a_pod_stop_tells_each_container_stopped_before_the_pod() {
    let f = fixture().await;
    let (service, pod_id, ids, mut events) = running_pod(&f).await;
    service
        .serve_stop_pod_sandbox(StopPodSandboxRequest {
            pod_sandbox_id: pod_id.clone(),
        })
        .await
        .expect("stop");
    let (seen, last) = drain(&mut events);
    let stopped = ContainerEventType::ContainerStoppedEvent as i32;
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert_eq!(seen[2], (pod_id.clone(), stopped), "the pod last: {seen:?}");
    let mut first: Vec<_> = seen[..2].to_vec();
    first.sort();
    let mut want: Vec<_> = ids.iter().map(|id| (id.clone(), stopped)).collect();
    want.sort();
    assert_eq!(first, want);
    // The pod's event shows it not ready and every container exited.
    let last = last.expect("the pod's event");
    let status = last.pod_sandbox_status.expect("pod status");
    assert_eq!(status.state, PodSandboxState::SandboxNotready as i32);
    assert_eq!(last.containers_statuses.len(), 2);
    for status in &last.containers_statuses {
        assert_eq!(status.state, ContainerState::ContainerExited as i32);
    }
}

#[tokio::test]
async fn a_pod_remove_whose_teardown_fails_tells_no_deleted_for_the_pod() {
    let f = fixture().await;
    let (service, pod_id, ids, mut events) = running_pod(&f).await;
    f.pods.journal.fail("cni del");
    let request = || RemovePodSandboxRequest {
        pod_sandbox_id: pod_id.clone(),
    };
    let status = service
        .serve_remove_pod_sandbox(request())
        .await
        .expect_err("the DEL fails");
    assert_ne!(status.code(), Code::Ok);
    assert!(status.message().contains("injected"), "{status:?}");
    let (seen, _) = drain(&mut events);
    let (stopped, deleted) = (
        ContainerEventType::ContainerStoppedEvent as i32,
        ContainerEventType::ContainerDeletedEvent as i32,
    );
    for id in &ids {
        assert_eq!(
            kinds(&seen, std::slice::from_ref(id)),
            [(id.clone(), stopped), (id.clone(), deleted)],
            "{seen:?}"
        );
    }
    assert_eq!(kinds(&seen, std::slice::from_ref(&pod_id)), [], "{seen:?}");
    let record = f.pods.manager.published(&pod_id).expect("still listed");
    assert_eq!(
        record.state,
        crate::sandbox::store::SandboxState::NotReady,
        "NotReady"
    );

    f.pods.journal.heal();
    service
        .serve_remove_pod_sandbox(request())
        .await
        .expect("the next remove");
    let (seen, _) = drain(&mut events);
    assert_eq!(
        seen,
        [(pod_id.clone(), stopped), (pod_id.clone(), deleted)],
        "the pod's STOPPED, then DELETED"
    );
}

#[tokio::test]
async fn a_pod_call_without_an_id_is_refused_naming_the_field() {
    let f = fixture().await;
    let service = service(&f);
    let status = service
        .serve_stop_pod_sandbox(StopPodSandboxRequest::default())
        .await
        .expect_err("no id");
    assert_eq!(
        (status.code(), status.message()),
        (Code::InvalidArgument, "pod_sandbox_id is required")
    );
    let status = service
        .serve_remove_pod_sandbox(RemovePodSandboxRequest::default())
        .await
        .expect_err("no id");
    assert_eq!(status.code(), Code::InvalidArgument);
}

#[tokio::test]
async fn a_failed_restore_tells_nothing_and_a_restore_tells_the_pod_first() {
    use crate::pod::tests::{checkpoint_of_three, checkpointable_pod, pods_over, three, Recorder};
    use cri_api::v1::RestorePodRequest;

    let f = fixture().await;
    let out = checkpoint_of_three(&f, &pods_over(&f.manager, Recorder::new())).await;
    let service = service(&f);
    let mut events = service.context().events.subscribe();
    let request = || RestorePodRequest {
        checkpoint_path: out.clone(),
        config: Some(checkpointable_pod()),
        container_configs: three(),
        ..Default::default()
    };
    f.journal.fail_after("launch shim", 2);
    let status = service
        .serve_restore_pod(request())
        .await
        .expect_err("the third fails");
    assert!(
        status.message().contains("restoring container three"),
        "{status:?}"
    );
    assert_eq!(drain(&mut events).0, [], "no events for what went");
    assert!(f.pods.manager.store.all().is_empty(), "no pod left");
    crate::container::lifecycle_tests::assert_no_trace(&f, "no container left");

    f.journal.heal();
    let restored = service.serve_restore_pod(request()).await.expect("restore");
    let pod_id = restored.pod_sandbox_id;
    let (seen, _) = drain(&mut events);
    let mut want = vec![
        (
            pod_id.clone(),
            ContainerEventType::ContainerCreatedEvent as i32,
        ),
        (
            pod_id.clone(),
            ContainerEventType::ContainerStartedEvent as i32,
        ),
    ];
    for restored in &restored.restored_containers {
        want.push((
            restored.container_id.clone(),
            ContainerEventType::ContainerCreatedEvent as i32,
        ));
    }
    assert_eq!(seen, want);
}
