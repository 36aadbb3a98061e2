//! The sandbox lifecycle's rules, through fakes of its seams (no root):
//! a failed run undoes every step in reverse and frees the name, stop and
//! remove are idempotent, concurrent runs and removes keep the store whole.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use berth_cgroups::fake::FakeManager;
use berth_cgroups::{CgroupManager, Driver, ParentTracker};
use cri_api::v1::{PodSandboxConfig, PodSandboxMetadata};

use super::store::{SandboxState, SandboxStore};
use super::{SandboxError, SandboxManager};
use crate::fakes::{FakeNamespaces, FakeNetwork, Journal};
use crate::runtime_handlers::RuntimeHandlers;

pub(crate) struct Fixture {
    pub manager: Arc<SandboxManager>,
    pub journal: Arc<Journal>,
    pub cgroups: Arc<FakeManager>,
    pub network: Arc<FakeNetwork>,
    pub namespaces: Arc<FakeNamespaces>,
    pub dir: tempfile::TempDir,
}

pub(crate) fn fixture() -> Fixture {
    fixture_with_handlers(|_, handlers| handlers)
}

/// As [`fixture`], with the handlers `handlers` makes of the default one
/// (given the fixture's dir).
pub(crate) fn fixture_with_handlers(
    handlers: impl FnOnce(&Path, RuntimeHandlers) -> RuntimeHandlers,
) -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let journal = Journal::new();
    let cgroups = Arc::new(FakeManager::new());
    let dyn_cgroups: Arc<dyn CgroupManager> = cgroups.clone();
    let network = Arc::new(FakeNetwork::new(journal.clone(), dir.path().join("cni")));
    let namespaces = Arc::new(FakeNamespaces {
        journal: journal.clone(),
        cgroups: cgroups.clone(),
        live: Default::default(),
    });
    let manager = SandboxManager {
        store: SandboxStore::open(&dir.path().join("sandboxes")).expect("store"),
        cgroups: dyn_cgroups.clone(),
        parents: ParentTracker::open(dyn_cgroups, dir.path().join("parents.json"))
            .expect("tracker"),
        driver: Driver::Cgroupfs,
        default_parent: "/berth".into(),
        network: network.clone(),
        namespaces: namespaces.clone(),
        ns_dir: dir.path().join("ns"),
        pods_dir: dir.path().join("pods"),
        cgroup_lock: std::sync::Mutex::new(()),
        runtime_handlers: Arc::new(handlers(
            dir.path(),
            RuntimeHandlers::default_only(
                dir.path().join("state/runtime"),
                &crate::kernel_features::KernelFeatures {
                    recursive_read_only: true,
                    user_namespaces: true,
                },
            ),
        )),
        user_namespaces: true,
        lsm: berth_spec::LsmHost::default(),
        pod_cidr: std::sync::RwLock::new(None),
        unfinished: Default::default(),
    };
    Fixture {
        manager: Arc::new(manager),
        journal,
        cgroups,
        network,
        namespaces,
        dir,
    }
}

pub(crate) fn pod(name: &str) -> PodSandboxConfig {
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: name.into(),
            namespace: "default".into(),
            uid: format!("uid-{name}"),
            attempt: 0,
        }),
        hostname: name.into(),
        ..Default::default()
    }
}

/// The entries of a directory, sorted (none if it does not exist).
pub(crate) fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .map(|entry| {
                    entry
                        .expect("entry")
                        .file_name()
                        .to_string_lossy()
                        .into_owned()
                })
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Pins are undone in no particular order: they are sorted here.
fn sorted_pins(entries: Vec<String>) -> Vec<String> {
    let mut out = Vec::new();
    let mut pins = Vec::new();
    for entry in entries {
        let is_pin = ["net", "ipc", "uts", "pid"]
            .iter()
            .any(|kind| entry == format!("unmount {kind}"));
        if is_pin {
            pins.push(entry);
            continue;
        }
        if !pins.is_empty() {
            pins.sort();
            out.append(&mut pins);
        }
        out.push(entry);
    }
    pins.sort();
    out.append(&mut pins);
    out
}

/// The fakes' entries without the sandbox ids they name.
fn unnamed(entries: Vec<String>) -> Vec<String> {
    entries
        .into_iter()
        .map(|entry| match entry.split_once(" pinns and infra of ") {
            Some((kill, _)) => kill.to_string(),
            None => entry,
        })
        .collect()
}

const PINS_UNDONE: [&str; 4] = ["unmount ipc", "unmount net", "unmount pid", "unmount uts"];

#[tokio::test]
async fn a_failed_run_undoes_each_step_in_reverse_and_frees_the_name() {
    // The step that fails, and what must have been done then undone.
    let cases: BTreeMap<&str, Vec<&str>> = [
        // berth-pinns failed: whatever it may have left is searched for.
        ("pin", vec!["pin", "kill unrecorded"]),
        (
            "identify",
            [&["pin", "identify"][..], &PINS_UNDONE].concat(),
        ),
        (
            "mount shm",
            [
                // The shm's entry precedes the mount: its undo runs,
                // harmless when the mount never happened.
                &[
                    "pin",
                    "identify",
                    "clamp",
                    "mount shm",
                    "unmount shm",
                    "kill infra",
                ][..],
                &PINS_UNDONE,
            ]
            .concat(),
        ),
        (
            "cni add",
            [
                &[
                    "pin",
                    "identify",
                    "clamp",
                    "mount shm",
                    "cni add",
                    // A failed ADD may have allocated the IP: DEL frees it.
                    "cni del",
                    "unmount shm",
                    "kill infra",
                ][..],
                &PINS_UNDONE,
            ]
            .concat(),
        ),
    ]
    .into();
    for (step, expected) in cases {
        let f = fixture();
        f.journal.fail(step);
        let err = f.manager.run(pod("web"), "").await.unwrap_err();
        assert!(
            !matches!(err, SandboxError::NameReserved { .. }),
            "{step}: {err}"
        );
        assert_eq!(
            sorted_pins(unnamed(f.journal.entries())),
            expected,
            "{step}"
        );
        assert_no_trace(&f, step);
        f.journal.heal();
        f.manager
            .run(pod("web"), "")
            .await
            .unwrap_or_else(|err| panic!("after {step}: the name is free again: {err}"));
    }
}

#[tokio::test]
async fn a_failed_cgroup_step_undoes_what_came_before() {
    for op in ["ensure_parent", "create", "add_process"] {
        let f = fixture();
        f.cgroups.fail(op);
        let err = f.manager.run(pod("web"), "").await.unwrap_err();
        assert!(err.to_string().contains("injected failure"), "{op}: {err}");
        if op == "add_process" {
            // The move runs beside CNI ADD: the network is taken down, the
            // infra process is killed, its pins go.
            assert_eq!(
                sorted_pins(f.journal.entries()),
                [
                    &[
                        "pin",
                        "identify",
                        "clamp",
                        "mount shm",
                        "cni add",
                        "cni del",
                        "unmount shm",
                        "kill infra"
                    ][..],
                    &PINS_UNDONE
                ]
                .concat()
            );
        } else {
            assert!(f.journal.entries().is_empty(), "{op}");
        }
        assert_no_trace(&f, op);
    }
}

/// Nothing of a failed run is left: no record, dir, pin, cgroup, lease,
/// process or mount.
pub(crate) fn assert_no_trace(f: &Fixture, step: &str) {
    assert_eq!(f.network.leases(), Vec::<String>::new(), "{step}: leases");
    assert_eq!(
        f.namespaces.live.processes(),
        Vec::<i32>::new(),
        "{step}: processes"
    );
    assert_eq!(
        f.namespaces.live.mounts(),
        Vec::<std::path::PathBuf>::new(),
        "{step}: mounts"
    );
    assert!(f.manager.store.all().is_empty(), "{step}");
    assert_eq!(
        entries(&f.dir.path().join("sandboxes")),
        Vec::<String>::new(),
        "{step}"
    );
    assert_eq!(
        entries(&f.dir.path().join("ns")),
        Vec::<String>::new(),
        "{step}"
    );
    assert_eq!(
        entries(&f.dir.path().join("pods")),
        Vec::<String>::new(),
        "{step}: pod files"
    );
    assert_eq!(f.cgroups.cgroups(), Vec::<String>::new(), "{step}");
}

#[tokio::test]
async fn stop_and_remove_are_idempotent() {
    let f = fixture();
    let id = f.manager.run(pod("web"), "").await.expect("run");
    f.journal.clear();
    f.manager.stop(&id).await.expect("stop");
    f.manager.stop(&id).await.expect("stop again");
    // Stop undoes what goes at stop once: the second finds nothing left.
    assert_eq!(f.journal.entries(), ["cni del", "kill infra"]);
    f.manager.remove(&id).await.expect("remove");
    f.manager.remove(&id).await.expect("remove again");
    f.manager.stop(&id).await.expect("stop after remove");
    f.manager.remove("no-such-pod").await.expect("unknown");
    f.manager.stop("no-such-pod").await.expect("unknown");
    assert_no_trace(&f, "remove");
}

#[tokio::test]
async fn the_same_name_twice_is_refused_and_names_the_holder() {
    let f = fixture();
    let id = f.manager.run(pod("web"), "").await.expect("run");
    match f.manager.run(pod("web"), "").await {
        Err(SandboxError::NameReserved { holder, .. }) => assert_eq!(holder, id),
        other => panic!("{other:?}"),
    }
    f.manager.remove(&id).await.expect("remove");
    f.manager
        .run(pod("web"), "")
        .await
        .expect("the name is free");
}

#[tokio::test]
async fn concurrent_runs_and_removes_keep_the_store_whole() {
    let f = fixture();
    let runs: Vec<_> = (0..8)
        .map(|n| {
            let manager = f.manager.clone();
            // Two runs per name: one of each pair wins.
            tokio::spawn(async move { manager.run(pod(&format!("p{}", n / 2)), "").await })
        })
        .collect();
    let mut ids = Vec::new();
    let mut refused = 0;
    for run in runs {
        match run.await.expect("task") {
            Ok(id) => ids.push(id),
            Err(SandboxError::NameReserved { .. }) => refused += 1,
            Err(err) => panic!("{err}"),
        }
    }
    assert_eq!((ids.len(), refused), (4, 4));
    assert_eq!(f.manager.store.all().len(), 4);
    let removes: Vec<_> = ids
        .iter()
        .flat_map(|id| [id.clone(), id.clone()])
        .map(|id| {
            let manager = f.manager.clone();
            tokio::spawn(async move { manager.remove(&id).await })
        })
        .collect();
    for remove in removes {
        remove.await.expect("task").expect("remove");
    }
    assert_no_trace(&f, "concurrent remove");
}

#[tokio::test]
async fn an_unconfigured_runtime_handler_is_refused_before_anything_is_made() {
    let f = fixture();
    let err = f.manager.run(pod("web"), "kata").await.unwrap_err();
    assert!(
        matches!(err, SandboxError::UnknownRuntimeHandler { .. }),
        "{err}"
    );
    assert!(f.journal.entries().is_empty());
    assert_no_trace(&f, "handler");
}

/// What a berthd killed just before a run's record was written leaves:
/// everything but the record.
async fn crash_before_record(f: &Fixture, name: &str) -> String {
    let id = f.manager.run(pod(name), "").await.expect("run");
    std::fs::remove_file(
        f.dir
            .path()
            .join("sandboxes")
            .join(&id)
            .join("sandbox.json"),
    )
    .expect("remove record");
    f.manager.store.remove(&id);
    f.journal.clear();
    id
}

#[tokio::test]
async fn recovery_undoes_a_run_that_left_no_record() {
    let f = fixture();
    let id = crash_before_record(&f, "web").await;
    // Another pod, recorded, must be left alone.
    let kept = f.manager.run(pod("db"), "").await.expect("run");
    f.journal.clear();
    assert_eq!(f.manager.recover().await, (1, 0));
    f.manager.remove_unused_parents();
    let mut entries = f.journal.entries();
    // Pins are released in directory order.
    entries[3..].sort();
    assert_eq!(
        entries,
        [
            "cni del".to_string(),
            "unmount shm".to_string(),
            "kill infra".to_string(),
            "unmount ipc".to_string(),
            "unmount net".to_string(),
            "unmount pid".to_string(),
            "unmount uts".to_string(),
        ]
    );
    assert!(
        !f.cgroups
            .cgroups()
            .iter()
            .any(|cgroup| cgroup.ends_with(&id)),
        "{:?}",
        f.cgroups.cgroups()
    );
    assert!(f
        .manager
        .store
        .record_dir(&kept)
        .join("sandbox.json")
        .exists());
    assert!(f
        .cgroups
        .exists(&f.manager.get(&kept).expect("kept").lock().await.cgroup_path));
    f.manager.remove(&kept).await.expect("remove");
    assert_no_trace(&f, "recovered");
}

#[tokio::test]
async fn recovery_releases_pins_no_record_names_and_is_idempotent() {
    let f = fixture();
    let id = crash_before_record(&f, "web").await;
    // A removal cut short after the sandbox dir went: only pins and the
    // pod's files dir are left.
    std::fs::remove_dir_all(f.dir.path().join("sandboxes").join(&id)).expect("rm");
    assert_eq!(f.manager.recover().await, (0, 2));
    assert_eq!(f.manager.recover().await, (0, 0));
    assert_eq!(entries(&f.dir.path().join("ns")), Vec::<String>::new());
    assert_eq!(entries(&f.dir.path().join("pods")), Vec::<String>::new());
}

/// Status and lists read a pod as last persisted: a stop held in CNI DEL
/// (a slow plugin) holds its record, and must not hold them too.
#[tokio::test]
async fn a_pod_stop_in_progress_does_not_hold_up_its_status() {
    let f = fixture();
    let id = f.manager.run(pod("web"), "").await.expect("pod");
    let closed = f.journal.del_gate.write().await;
    let stopping = tokio::spawn({
        let manager = f.manager.clone();
        let id = id.clone();
        async move { manager.stop(&id).await }
    });
    while !f.journal.entries().iter().any(|entry| entry == "cni del") {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    let handle = f.manager.get(&id).expect("handle");
    assert!(handle.try_lock().is_err(), "the stop holds the record");
    let seen = f.manager.published(&id).expect("published");
    assert_eq!(seen.state, SandboxState::Ready);
    drop(closed);
    stopping.await.expect("join").expect("stop");
    let seen = f.manager.published(&id).expect("published");
    assert_eq!(seen.state, SandboxState::NotReady);
    assert!(!seen.network_attached);
}

#[tokio::test]
async fn a_user_namespace_on_the_hosts_network_pins_no_network_and_calls_no_cni() {
    use cri_api::v1::{
        IdMapping, LinuxPodSandboxConfig, LinuxSandboxSecurityContext, NamespaceMode,
        NamespaceOption, UserNamespace,
    };
    // KEP-5607, as kubelet sends it for hostNetwork with hostUsers: false.
    let f = fixture();
    let mapping = vec![IdMapping {
        container_id: 0,
        host_id: 65536,
        length: 65536,
    }];
    let mut config = pod("hostnet");
    config.linux = Some(LinuxPodSandboxConfig {
        security_context: Some(LinuxSandboxSecurityContext {
            namespace_options: Some(NamespaceOption {
                network: NamespaceMode::Node as i32,
                pid: NamespaceMode::Container as i32,
                ipc: NamespaceMode::Pod as i32,
                userns_options: Some(UserNamespace {
                    mode: NamespaceMode::Pod as i32,
                    uids: mapping.clone(),
                    gids: mapping,
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    let id = f.manager.run(config, "").await.expect("RunPodSandbox");
    let record = f
        .manager
        .store
        .published(&id)
        .expect("one sandbox")
        .expect("its record");
    let mut pinned: Vec<&str> = record.namespaces.keys().map(String::as_str).collect();
    pinned.sort();
    assert_eq!(pinned, ["ipc", "user"]);
    assert!(!record.network_attached && record.ips.is_empty());
    let entries = f.journal.entries();
    assert!(
        !entries.iter().any(|entry| entry.starts_with("cni")),
        "{entries:?}"
    );
}
