//! The container lifecycle's rules, through fakes of its seams (no root):
//! a failed create undoes every step in reverse and frees the name, the
//! three PID TARGET failures are distinct, stop and remove are idempotent,
//! concurrent creates and removes keep the store whole.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use berth_shim_api::protocol::RunState;

use berth_cgroups::CgroupManager;
use berth_image::store::{ImageRecord, ImageStore, LayerRecord};
use cri_api::v1::{
    ContainerConfig, ContainerMetadata, ImageSpec, LinuxContainerConfig,
    LinuxContainerSecurityContext, NamespaceMode, NamespaceOption,
};

use super::store::{ContainerRecord, ContainerStore};
use super::{ContainerError, ContainerManager};
use crate::fakes::{FakeCriu, FakeMounts, FakeShims, Journal};
use crate::sandbox::lifecycle_tests::{fixture as sandbox_fixture, pod, Fixture as Pods};

pub(crate) const IMAGE: &str = "docker.io/library/fake:latest";

pub(crate) struct Fixture {
    pub manager: Arc<ContainerManager>,
    pub journal: Arc<Journal>,
    pub pods: Pods,
    pub dir: tempfile::TempDir,
    /// The shims, as the fake they are: what each launch was given.
    pub fake_shims: Arc<FakeShims>,
}

pub(crate) async fn fixture() -> Fixture {
    fixture_on(sandbox_fixture()).await
}

/// The fixture over pods the caller made (handlers of its own).
pub(crate) async fn fixture_on(pods: Pods) -> Fixture {
    fixture_with_journal(pods, Journal::new()).await
}

/// The fixture whose container fakes write into the pods' journal: one
/// order of every step, the pod's and its containers'.
pub(crate) async fn fixture_sharing_journal() -> Fixture {
    let pods = sandbox_fixture();
    let journal = pods.journal.clone();
    fixture_with_journal(pods, journal).await
}

async fn fixture_with_journal(pods: Pods, journal: Arc<Journal>) -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let images = ImageStore::open(&dir.path().join("images")).expect("images");
    add_image(&images);
    let fake_shims = Arc::new(FakeShims::new(journal.clone()));
    let manager = ContainerManager {
        store: ContainerStore::open(&dir.path().join("state/containers")).expect("store"),
        images: Arc::new(images),
        sandboxes: pods.manager.clone(),
        layers_dir: dir.path().join("root/containers"),
        shims_dir: dir.path().join("state/shims"),
        shim: crate::helper_binary::HelperBinary::unprotected("/nonexistent/berth-shim"),
        shims: fake_shims.clone(),
        mounts: Arc::new(FakeMounts {
            journal: journal.clone(),
        }),
        cgroups: pods.cgroups.clone(),
        layer_leases: Default::default(),
        cdi_spec_dirs: vec![dir.path().join("cdi")],
        criu: Arc::new(FakeCriu {
            journal: journal.clone(),
        }),
        criu_check: Default::default(),
        allow_checkpoint_images: false,
        default_rlimits: Vec::new(),
        features: berth_spec::CgroupFeatures::default(),
        trim_mounts: None,
        states: super::state_cache::StateCache::new(64),
    };
    Fixture {
        manager: Arc::new(manager),
        journal,
        pods,
        dir,
        fake_shims,
    }
}

/// `sha256:` and 64 times `c`: a digest for fakes.
pub(crate) fn digest(c: char) -> String {
    format!("sha256:{}", c.to_string().repeat(64))
}

/// A fake image's record: id `a…`, manifest `c…`, one layer of each
/// (blob digest, diff id) pair.
pub(crate) fn image_record(layers: &[(char, char)]) -> ImageRecord {
    ImageRecord {
        id: digest('a'),
        repo_tags: vec![],
        repo_digests: vec![],
        size: 1,
        manifest_digest: digest('c'),
        layers: layers
            .iter()
            .map(|&(blob, diff_id)| LayerRecord {
                blob_digest: digest(blob),
                diff_id: digest(diff_id),
                media_type: "application/vnd.oci.image.layer.v1.tar".into(),
                size: 1,
            })
            .collect(),
        user: String::new(),
        pinned: false,
        checkpoint_of: None,
    }
}

/// One image with one layer; its config blob is real JSON.
fn add_image(store: &ImageStore) {
    let config = serde_json::json!({
        "architecture": "amd64",
        "os": "linux",
        "config": {"Cmd": ["sh"]},
        "rootfs": {"type": "layers", "diff_ids": [digest('b')]},
    });
    store
        .write_blob(&digest('a'), &serde_json::to_vec(&config).expect("json"))
        .expect("blob");
    store
        .commit(
            image_record(&[('d', 'b')]),
            Some(IMAGE.into()),
            Some(format!("docker.io/library/fake@{}", digest('c'))),
        )
        .expect("commit");
}

impl Fixture {
    /// Pod `name` under runtime handler `handler` ("" the default): its id.
    pub(crate) async fn pod(&self, name: &str, handler: &str) -> String {
        self.pods
            .manager
            .run(pod(name), handler)
            .await
            .expect("pod")
    }

    /// Creates `config` in `pod_id`, which must succeed: the id.
    pub(crate) async fn create_ok(&self, pod_id: &str, config: ContainerConfig) -> String {
        self.manager
            .create(pod_id, config, None)
            .await
            .unwrap_or_else(|err| panic!("create: {err}"))
    }

    /// Creates `config` in `pod_id`, which must fail: the error.
    pub(crate) async fn create_err(&self, pod_id: &str, config: ContainerConfig) -> ContainerError {
        self.manager
            .create(pod_id, config, None)
            .await
            .expect_err("the create must fail")
    }

    /// A pod "web" and a container `name` in it: their ids.
    pub(crate) async fn pod_and_container(&self, name: &str) -> (String, String) {
        let pod_id = self.pod("web", "").await;
        let id = self.create_ok(&pod_id, container(name)).await;
        (pod_id, id)
    }

    /// [`Fixture::pod_and_container`], the container started.
    pub(crate) async fn running(&self, name: &str) -> (String, String) {
        let (pod_id, id) = self.pod_and_container(name).await;
        self.manager.start(&id).await.expect("start");
        (pod_id, id)
    }
}

pub(crate) fn container(name: &str) -> ContainerConfig {
    ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: name.into(),
            attempt: 0,
        }),
        image: Some(ImageSpec {
            image: IMAGE.into(),
            ..Default::default()
        }),
        command: vec!["sh".into()],
        ..Default::default()
    }
}

/// `container(name)` made from `image` (an image name or a checkpoint).
fn of_image(name: &str, image: &str) -> ContainerConfig {
    let mut config = container(name);
    config.image = Some(ImageSpec {
        image: image.into(),
        ..Default::default()
    });
    config
}

/// A container joining the PID namespace of `target`.
fn targeting(name: &str, target: &str) -> ContainerConfig {
    let mut config = container(name);
    config.linux = Some(LinuxContainerConfig {
        security_context: Some(LinuxContainerSecurityContext {
            namespace_options: Some(NamespaceOption {
                pid: NamespaceMode::Target as i32,
                target_id: target.into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    config
}

fn entries(dir: &Path) -> Vec<String> {
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
                .filter(|name| name != "trash")
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Nothing of a container is left: no record, bundle, layer or shim dir.
pub(crate) fn assert_no_trace(f: &Fixture, what: &str) {
    assert!(f.manager.store.all().is_empty(), "{what}");
    for dir in ["state/containers", "root/containers", "state/shims"] {
        assert_eq!(
            entries(&f.dir.path().join(dir)),
            Vec::<String>::new(),
            "{what}: {dir}"
        );
    }
}

#[tokio::test]
async fn a_failed_create_undoes_each_step_in_reverse_and_frees_the_name() {
    let cases: [(&str, &[&str]); 2] = [
        // Journaled before it is made: a failed mount is unmounted too
        // (harmless on what was never mounted).
        ("mount rootfs", &["mount rootfs", "unmount rootfs"]),
        (
            "launch shim",
            &[
                "mount rootfs",
                "launch shim",
                "kill Number(9) all=true",
                "shutdown shim",
                // No shim answered: one the failed launch may have left
                // is searched for and killed.
                "kill unrecorded shim",
                "unmount rootfs",
            ],
        ),
    ];
    for (step, expected) in cases {
        let f = fixture().await;
        let pod_id = f.pod("web", "").await;
        f.journal.fail(step);
        let err = f.create_err(&pod_id, container("app")).await;
        assert!(
            !matches!(err, ContainerError::NameReserved { .. }),
            "{step}: {err}"
        );
        assert_eq!(f.journal.entries(), expected, "{step}");
        assert_no_trace(&f, step);
        f.journal.heal();
        f.manager
            .create(&pod_id, container("app"), None)
            .await
            .unwrap_or_else(|err| panic!("after {step}: the name is free again: {err}"));
    }
}

#[tokio::test]
async fn an_unreadable_image_config_says_why() {
    let f = fixture().await;
    let pod_id = f.pod("web", "").await;
    let blob = f
        .manager
        .images
        .blob_path(&format!("sha256:{}", "a".repeat(64)))
        .expect("path");
    std::fs::write(&blob, b"not json").expect("corrupt");
    let err = f.create_err(&pod_id, container("app")).await;
    let ContainerError::ImageConfig { source, .. } = &err else {
        panic!("{err:?}");
    };
    assert!(!source.to_string().is_empty());
    assert!(err.to_string().contains("is unreadable: "), "{err}");
    assert_no_trace(&f, "image config");
}

#[tokio::test]
async fn pid_target_failures_are_three_distinct_errors_naming_the_id() {
    let f = fixture().await;
    let pod_id = f.pod("web", "").await;
    let other_pod = f.pod("other", "").await;

    let err = f.create_err(&pod_id, targeting("debug", "nope")).await;
    assert!(
        matches!(&err, ContainerError::TargetNotFound { target_id } if target_id == "nope"),
        "{err:?}"
    );

    let target = f.create_ok(&pod_id, container("app")).await;
    let err = f.create_err(&pod_id, targeting("debug", &target)).await;
    assert!(
        matches!(&err, ContainerError::TargetNotRunning { target_id } if *target_id == target),
        "{err:?}"
    );

    f.manager.start(&target).await.expect("start");
    let err = f.create_err(&other_pod, targeting("debug", &target)).await;
    assert!(
        matches!(&err, ContainerError::TargetInOtherSandbox { target_id } if *target_id == target),
        "{err:?}"
    );

    // Each failure freed the name: the same name works once the target runs.
    f.create_ok(&pod_id, targeting("debug", &target)).await;
}

#[tokio::test]
async fn stop_and_remove_are_idempotent() {
    let f = fixture().await;
    let pod_id = f.pod("web", "").await;
    let id = f.create_ok(&pod_id, container("app")).await;
    f.manager.start(&id).await.expect("start");
    f.journal.clear();
    f.manager.stop(&id, 10).await.expect("stop");
    f.manager.stop(&id, 10).await.expect("stop again");
    assert_eq!(f.journal.entries(), ["kill Number(15) all=false"]);
    f.journal.clear();
    f.manager.remove(&id).await.expect("remove");
    f.manager.remove(&id).await.expect("remove again");
    f.manager.stop(&id, 0).await.expect("stop after remove");
    f.manager
        .remove("no-such-container")
        .await
        .expect("unknown");
    assert_eq!(f.journal.entries(), ["shutdown shim", "unmount rootfs"]);
    assert_no_trace(&f, "remove");
    // The name is free again.
    f.create_ok(&pod_id, container("app")).await;
}

#[tokio::test]
async fn removing_a_running_container_stops_it_first() {
    let f = fixture().await;
    let pod_id = f.pod("web", "").await;
    let id = f.create_ok(&pod_id, container("app")).await;
    f.manager.start(&id).await.expect("start");
    f.journal.clear();
    f.manager.remove(&id).await.expect("remove");
    assert_eq!(
        f.journal.entries(),
        ["kill Number(9) all=true", "shutdown shim", "unmount rootfs"]
    );
    assert_no_trace(&f, "remove running");
}

#[tokio::test]
async fn concurrent_creates_and_removes_keep_the_store_whole() {
    let f = fixture().await;
    let pod_id = f.pod("web", "").await;
    let creates: Vec<_> = (0..8)
        .map(|n| {
            let manager = f.manager.clone();
            let pod_id = pod_id.clone();
            // Two creates per name: one of each pair wins.
            tokio::spawn(async move {
                manager
                    .create(&pod_id, container(&format!("c{}", n / 2)), None)
                    .await
            })
        })
        .collect();
    let mut ids = Vec::new();
    let mut refused = 0;
    for create in creates {
        match create.await.expect("task") {
            Ok(id) => ids.push(id),
            Err(ContainerError::NameReserved { .. }) => refused += 1,
            Err(err) => panic!("{err}"),
        }
    }
    assert_eq!((ids.len(), refused), (4, 4));
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
async fn a_container_needs_its_pod_and_image() {
    let f = fixture().await;
    let err = f.create_err("no-such-pod", container("app")).await;
    assert_eq!(err.to_string(), "pod sandbox \"no-such-pod\" not found");
    let pod_id = f.pod("web", "").await;
    let config = of_image("app", "missing:1");
    let err = f.create_err(&pod_id, config).await;
    assert!(
        matches!(err, ContainerError::ImageNotFound { .. }),
        "{err:?}"
    );
    assert!(f.journal.entries().is_empty());
    assert_no_trace(&f, "missing");
}

/// `container(name)` with an image volume of `image` at `/vol`.
fn with_image_volume(name: &str, image: &str, sub_path: &str) -> ContainerConfig {
    let mut config = container(name);
    config.mounts.push(cri_api::v1::Mount {
        container_path: "/vol".into(),
        image: Some(ImageSpec {
            image: image.into(),
            ..Default::default()
        }),
        image_sub_path: sub_path.into(),
        ..Default::default()
    });
    config
}

#[tokio::test]
async fn an_image_volume_needs_its_image_and_its_sub_path() {
    let f = fixture().await;
    let pod_id = f.pod("web", "").await;
    let err = f
        .create_err(&pod_id, with_image_volume("app", "missing:1", ""))
        .await;
    assert!(
        matches!(&err, ContainerError::ImageVolumeNotFound { image, container_path }
            if image == "missing:1" && container_path == "/vol"),
        "{err:?}"
    );
    assert!(f.journal.entries().is_empty());
    assert_no_trace(&f, "missing image volume");

    // The fake volume is an empty dir: no sub path exists in it.
    let err = f
        .create_err(&pod_id, with_image_volume("app", IMAGE, "data"))
        .await;
    assert!(
        matches!(&err, ContainerError::ImageSubPath { sub_path, .. } if sub_path == "data"),
        "{err:?}"
    );
    assert!(err.to_string().contains("\"data\" does not exist"), "{err}");
    assert_eq!(
        f.journal.entries(),
        ["mount rootfs", "mount image volume", "unmount rootfs"]
    );
    assert_no_trace(&f, "missing sub path");
}

#[tokio::test]
async fn a_failed_image_volume_mount_is_undone() {
    let f = fixture().await;
    let pod_id = f.pod("web", "").await;
    f.journal.fail("mount image volume");
    f.create_err(&pod_id, with_image_volume("app", IMAGE, ""))
        .await;
    assert_eq!(
        f.journal.entries(),
        ["mount rootfs", "mount image volume", "unmount rootfs"]
    );
    assert_no_trace(&f, "image volume mount");
    f.journal.heal();
    let id = f
        .create_ok(&pod_id, with_image_volume("app", IMAGE, ""))
        .await;
    let record = f.manager.get(&id).await.expect("record");
    assert_eq!(
        record.layers,
        [format!("sha256:{}", "b".repeat(64))],
        "held once"
    );
}

#[tokio::test]
async fn recovery_undoes_a_create_that_left_no_record() {
    let f = fixture().await;
    let pod_id = f.pod("web", "").await;
    let kept = f.create_ok(&pod_id, container("kept")).await;
    let id = f.create_ok(&pod_id, container("app")).await;
    // Killed just before the record was written: everything but it.
    std::fs::remove_file(f.manager.store.record_dir(&id).join("container.json")).expect("rm");
    f.manager.store.remove(&id);
    f.journal.clear();
    assert_eq!(f.manager.recover().await, (1, 0));
    // Its shim still serves: its delete removes the container.
    assert_eq!(f.journal.entries(), ["shutdown shim", "unmount rootfs"]);
    assert_eq!(f.manager.recover().await, (0, 0), "recovery is idempotent");
    let record = f.manager.get(&kept).await.expect("kept");
    assert!(record.bundle.join("container.json").exists());
    assert!(record.shim_dir.exists() && record.layer_dir.exists());
    f.manager.remove(&kept).await.expect("remove");
    assert_no_trace(&f, "recovered");
}

#[tokio::test]
async fn recovery_sweeps_what_a_removal_cut_short_left() {
    let f = fixture().await;
    let (_, id) = f.pod_and_container("app").await;
    let record = f.manager.get(&id).await.expect("record");
    // The bundle (with the record) went to the trash; the rest did not.
    std::fs::remove_dir_all(&record.bundle).expect("rm");
    f.manager.store.remove(&id);
    // The default handler's state root.
    std::fs::create_dir_all(f.pods.dir.path().join("state/runtime").join(&id)).expect("state");
    assert_eq!(f.manager.recover().await, (0, 3));
    assert_no_trace(&f, "swept");
}

#[tokio::test]
async fn a_container_whose_shim_is_gone_is_stopped_and_removed_through_its_cgroup() {
    let f = fixture().await;
    let (_, id) = f.running("app").await;
    let record = f.manager.get(&id).await.expect("record");
    f.pods.cgroups.create(record.cgroup_dir()).expect("cgroup");
    f.pods.cgroups.put_process(record.cgroup_dir(), 4711);
    // The shim dies (kill -9, OOM killer): its container runs on.
    f.manager.shims.kill_unrecorded(&record.shim_dir).await;
    assert!(f.manager.state(&record).await.is_none());
    f.journal.clear();
    f.manager.stop(&id, 30).await.expect("stop");
    assert_eq!(f.journal.entries(), ["record unknown exit"]);
    assert!(f
        .pods
        .cgroups
        .pids(record.cgroup_dir())
        .expect("pids")
        .is_empty());
    let state = f.manager.state(&record).await.expect("an exit is known");
    assert_eq!((state.exit_code, state.unknown), (Some(255), true));
    f.manager.remove(&id).await.expect("remove");
    assert!(!f.pods.cgroups.exists(record.cgroup_dir()));
    assert_no_trace(&f, "shim gone");
}

#[tokio::test]
async fn a_stop_that_finds_the_container_removed_meanwhile_succeeds() {
    let f = fixture().await;
    let (_, id) = f.running("app").await;
    // A pod's stop read the record; a RemoveContainer then took the
    // container, its shim and its dirs before the stop went on.
    let record = f.manager.get(&id).await.expect("record");
    f.manager.remove(&id).await.expect("remove");
    f.manager
        .stop_without_shim(&record)
        .await
        .expect("nothing left to stop is success");
    assert_no_trace(&f, "removed during a stop");
}

#[tokio::test]
async fn a_remove_after_one_cut_short_past_the_shim_dir_finishes() {
    let f = fixture().await;
    let (_, id) = f.running("app").await;
    let record = f.manager.get(&id).await.expect("record");
    // berthd died in a RemoveContainer after the shim and its dir went;
    // the record (in the bundle, undone last) is still there.
    f.manager.shims.kill_unrecorded(&record.shim_dir).await;
    std::fs::remove_dir_all(&record.shim_dir).expect("rm shim dir");
    f.manager
        .remove(&id)
        .await
        .expect("the next remove finishes it");
    assert_no_trace(&f, "remove cut short");
}

#[tokio::test]
async fn a_shim_that_does_not_answer_reports_the_last_state_known_on_disk() {
    let f = fixture().await;
    let pod_id = f.pod("web", "").await;
    let created = f.create_ok(&pod_id, container("made")).await;
    let running = f.create_ok(&pod_id, container("up")).await;
    let exited = f.create_ok(&pod_id, container("done")).await;
    for id in [&running, &exited] {
        f.manager.start(id).await.expect("start");
    }
    let record = |id: &str| {
        let record = f.manager.published(id).expect("record");
        (*record).clone()
    };
    // Every shim stops answering with nothing kept of it, as after a
    // berthd restart; one container exited just before its shim stopped.
    for id in [&created, &running, &exited] {
        let dir = record(id).shim_dir;
        f.manager.states.forget(&dir);
        f.fake_shims.stall(&dir);
    }
    f.fake_shims
        .exit_while_stalled(&record(&exited).shim_dir, 3);
    // The shims would be waited on for ever: the report's bound ends it.
    tokio::time::pause();

    let made = f.manager.state(&record(&created)).await.expect("known");
    assert_eq!((made.status, made.started_at), (RunState::Created, None));
    let up = f.manager.state(&record(&running)).await.expect("known");
    assert_eq!(up.status, RunState::Running);
    assert!(up.started_at.is_some(), "{up:?}");
    let done = f.manager.state(&record(&exited)).await.expect("known");
    assert_eq!((done.status, done.exit_code), (RunState::Stopped, Some(3)));
    assert!(done.started_at.is_some(), "{done:?}");

    // Of a record that never kept its start (an older berthd's), nothing
    // is known but what the shim would say.
    let mut old = record(&running);
    old.start = super::store::StartMark::Unrecorded;
    assert!(f.manager.state(&old).await.is_none());
}

/// The state reported for `record` (status, lists), twice over: the second
/// read comes from the state cache.
async fn reported(f: &Fixture, record: &ContainerRecord) -> Option<RunState> {
    let first = f.manager.state(record).await.map(|state| state.status);
    let second = f.manager.state(record).await.map(|state| state.status);
    assert_eq!(first, second, "{}: a cached read differs", record.id);
    first
}

#[tokio::test]
async fn the_reported_state_follows_every_move_of_the_container() {
    let f = fixture().await;
    let (pod_id, id) = f.pod_and_container("app").await;
    let record = f.manager.get(&id).await.expect("record");
    assert_eq!(reported(&f, &record).await, Some(RunState::Created));
    f.manager.start(&id).await.expect("start");
    assert_eq!(reported(&f, &record).await, Some(RunState::Running));
    f.manager.stop(&id, 10).await.expect("stop");
    assert_eq!(reported(&f, &record).await, Some(RunState::Stopped));
    f.manager.remove(&id).await.expect("remove");
    assert_eq!(reported(&f, &record).await, None);

    // A shim that dies leaves its container's state unknown.
    let other = f.create_ok(&pod_id, container("other")).await;
    f.manager.start(&other).await.expect("start");
    let record = f.manager.get(&other).await.expect("record");
    assert_eq!(reported(&f, &record).await, Some(RunState::Running));
    f.manager.shims.kill_unrecorded(&record.shim_dir).await;
    assert_eq!(reported(&f, &record).await, None);
}

/// Pod `name` with its own user namespace (kubelet's single mapping).
fn userns_pod(name: &str) -> cri_api::v1::PodSandboxConfig {
    let mut config = pod(name);
    config.linux = Some(cri_api::v1::LinuxPodSandboxConfig {
        security_context: Some(cri_api::v1::LinuxSandboxSecurityContext {
            namespace_options: Some(NamespaceOption {
                userns_options: Some(cri_api::v1::UserNamespace {
                    mode: NamespaceMode::Pod as i32,
                    uids: vec![cri_api::v1::IdMapping {
                        container_id: 0,
                        host_id: 1_200_000,
                        length: 65536,
                    }],
                    gids: vec![cri_api::v1::IdMapping {
                        container_id: 0,
                        host_id: 1_200_000,
                        length: 65536,
                    }],
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    config
}

/// `container(name)` with host dir `source` at `/data`.
fn with_volume(name: &str, source: &Path) -> ContainerConfig {
    let mut config = container(name);
    config.mounts.push(cri_api::v1::Mount {
        container_path: "/data".into(),
        host_path: source.display().to_string(),
        ..Default::default()
    });
    config
}

#[tokio::test]
async fn a_userns_pods_binds_are_idmapped_and_a_refusal_is_undone() {
    let f = fixture().await;
    let volume = f.dir.path().join("volume");
    std::fs::create_dir_all(&volume).expect("volume");
    let pod_id = f
        .pods
        .manager
        .run(userns_pod("web"), "")
        .await
        .expect("pod");
    let id = f.create_ok(&pod_id, with_volume("app", &volume)).await;
    // The volume and the pod's files, in the spec's order; not the pod's
    // /dev/shm (the mapped root's already).
    assert_eq!(
        f.journal.entries(),
        [
            "mount rootfs",
            "idmap bind /data",
            "idmap bind /etc/hostname",
            "idmap bind /etc/hosts",
            "idmap bind /etc/resolv.conf",
            "launch shim",
        ]
    );
    let record = f.manager.get(&id).await.expect("record");
    let spec: serde_json::Value = serde_json::from_slice(
        &std::fs::read(record.bundle.join("config.json")).expect("config.json"),
    )
    .expect("spec");
    let data = spec["mounts"]
        .as_array()
        .and_then(|mounts| mounts.iter().find(|m| m["destination"] == "/data"))
        .expect("the volume's mount");
    assert_eq!(
        data["source"],
        record.bundle.join("idmapped/0").display().to_string(),
        "the spec binds the view"
    );
    f.manager.remove(&id).await.expect("remove");

    f.journal.clear();
    f.journal.fail("idmap bind");
    let err = f.create_err(&pod_id, with_volume("app", &volume)).await;
    let status = tonic::Status::from(err);
    assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status:?}");
    let message = status.message();
    assert!(
        message.contains("\"/data\"")
            && message.contains(&format!("{:?}", volume.display().to_string()))
            && message.contains("EINVAL"),
        "{message}"
    );
    assert!(
        message.contains("does not support idmapped mounts"),
        "{message}"
    );
    assert_eq!(
        f.journal.entries(),
        ["mount rootfs", "idmap bind /data", "unmount rootfs"]
    );
    assert_no_trace(&f, "refused idmap");
}

/// The source of the spec's mount at `destination`.
fn mount_source(bundle: &Path, destination: &str) -> String {
    let spec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(bundle.join("config.json")).expect("config.json"))
            .expect("spec");
    spec["mounts"]
        .as_array()
        .and_then(|mounts| mounts.iter().find(|m| m["destination"] == destination))
        .and_then(|mount| mount["source"].as_str())
        .unwrap_or_else(|| panic!("no mount at {destination}"))
        .to_string()
}

/// Containers bind the pod's files from its dir under the root dir; those
/// of a pod an older berthd ran (no `files_dir`) from its sandbox dir.
#[tokio::test]
async fn a_pods_files_are_bound_from_its_files_dir_or_an_older_pods_sandbox_dir() {
    let f = fixture().await;
    let pod_id = f.pod("web", "").await;
    let id = f.create_ok(&pod_id, container("app")).await;
    let record = f.manager.get(&id).await.expect("record");
    let files = f.pods.dir.path().join("pods").join(&pod_id);
    for name in ["hostname", "hosts", "resolv.conf"] {
        assert_eq!(
            mount_source(&record.bundle, &format!("/etc/{name}")),
            files.join(name).display().to_string()
        );
    }
    f.manager.remove(&id).await.expect("remove");

    let handle = f.pods.manager.get(&pod_id).expect("pod");
    let sandbox_dir = {
        let mut pod = handle.lock().await;
        pod.files_dir = None;
        pod.dir.clone()
    };
    for name in ["hostname", "hosts", "resolv.conf"] {
        std::fs::copy(files.join(name), sandbox_dir.join(name)).expect("an older pod's file");
    }
    let id = f.create_ok(&pod_id, container("app")).await;
    let record = f.manager.get(&id).await.expect("record");
    assert_eq!(
        mount_source(&record.bundle, "/etc/hosts"),
        sandbox_dir.join("hosts").display().to_string()
    );
    f.manager.remove(&id).await.expect("remove");
    assert_no_trace(&f, "files");
}

#[tokio::test]
async fn recovery_unmounts_a_layer_dirs_views_before_deleting_it() {
    let f = fixture().await;
    let (_, id) = f.pod_and_container("app").await;
    let record = f.manager.get(&id).await.expect("record");
    std::fs::remove_dir_all(&record.bundle).expect("rm");
    f.manager.store.remove(&id);
    f.journal.clear();
    // The shim dir and the layer dir, unmounted before it is deleted.
    assert_eq!(f.manager.recover().await, (0, 2));
    assert_eq!(
        f.journal.entries(),
        ["kill unrecorded shim", "unmount rootfs"]
    );
    assert_no_trace(&f, "swept");
}

#[tokio::test]
async fn a_checkpoint_needs_a_running_container_and_criu_probed_once() {
    let f = fixture().await;
    let (_, id) = f.pod_and_container("app").await;
    let location = f.dir.path().join("ckpt.tar");
    let err = f
        .manager
        .checkpoint(&id, &location, Duration::ZERO)
        .await
        .expect_err("created, not running");
    assert!(matches!(err, ContainerError::NotRunning { .. }), "{err}");
    f.manager.start(&id).await.expect("start");
    // A probe that timed out is asked again; a failed one is kept.
    f.journal.fail("criu check slow");
    let err = f
        .manager
        .checkpoint(&id, &location, Duration::ZERO)
        .await
        .expect_err("criu check timed out");
    assert!(err.to_string().contains("did not finish"), "{err}");
    f.journal.heal();
    f.journal.fail("criu check");
    f.journal.clear();
    for _ in 0..2 {
        let err = f
            .manager
            .checkpoint(&id, &location, Duration::ZERO)
            .await
            .expect_err("criu cannot run");
        let text = err.to_string();
        assert!(matches!(err, ContainerError::CheckpointUnavailable { .. }));
        assert!(
            text.contains(&id) && text.contains("vdso: injected"),
            "{text}"
        );
    }
    assert_eq!(
        f.journal.entries(),
        ["criu check slow", "criu check"],
        "probed once more, then kept; no dump"
    );
    assert!(!location.exists());
    let state = f
        .manager
        .state(&f.manager.get(&id).await.expect("record"))
        .await;
    assert_eq!(state.map(|s| s.status), Some(RunState::Running));
}

#[tokio::test]
async fn a_checkpoint_writes_the_archive_and_a_failed_dump_leaves_none() {
    let f = fixture().await;
    f.journal.heal();
    let (_, id) = f.running("app").await;
    let record = f.manager.get(&id).await.expect("record");
    let upper = record.layer_dir.join("upper");
    std::fs::create_dir_all(upper.join("data")).expect("upper");
    std::fs::write(upper.join("data/count"), "41").expect("file");

    let failed = f.dir.path().join("failed.tar");
    f.journal.fail("criu dump");
    let err = f
        .manager
        .checkpoint(&id, &failed, Duration::ZERO)
        .await
        .expect_err("dump fails");
    assert!(
        matches!(err, ContainerError::CheckpointFailed { .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("Error (criu/cr-dump.c:1)"),
        "{err}"
    );
    assert!(!failed.exists());
    assert_eq!(work_dirs(&record.layer_dir), 0, "the work dir is removed");

    f.journal.heal();
    let location = f.dir.path().join("ckpt.tar");
    f.manager
        .checkpoint(&id, &location, Duration::ZERO)
        .await
        .expect("checkpoint");
    let unpacked =
        super::checkpoint_archive::unpack(&location, &f.dir.path().join("out")).expect("unpack");
    let config = super::checkpoint_archive::read_config_dump(&location).expect("config.dump");
    assert_eq!(config.id, id);
    assert_eq!(config.name, "app");
    assert_eq!(config.rootfs_image_name, IMAGE);
    for member in ["spec.dump", "rootfs-diff.tar", "deleted.files", "dump.log"] {
        assert!(unpacked.dir.join(member).is_file(), "{member}");
    }
    assert!(unpacked.dir.join("checkpoint/inventory.img").is_file());
    assert_eq!(work_dirs(&record.layer_dir), 0, "the work dir is removed");
}

/// The checkpoint work dirs in a layer dir.
fn work_dirs(layer_dir: &Path) -> usize {
    std::fs::read_dir(layer_dir)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("checkpoint-"))
                .count()
        })
        .unwrap_or(0)
}

#[tokio::test]
async fn a_container_created_from_a_checkpoint_uses_its_image_and_rootfs_changes() {
    let f = fixture().await;
    let (pod_id, id) = f.running("app").await;
    let record = f.manager.get(&id).await.expect("record");
    std::fs::create_dir_all(record.layer_dir.join("upper/data")).expect("upper");
    std::fs::write(record.layer_dir.join("upper/data/count"), "41").expect("file");
    let archive = f.dir.path().join("ckpt.tar");
    f.manager
        .checkpoint(&id, &archive, Duration::ZERO)
        .await
        .expect("checkpoint");
    f.manager.remove(&id).await.expect("remove");

    let config = of_image("app", &archive.to_string_lossy());
    let restored = f.create_ok(&pod_id, config.clone()).await;
    let record = f.manager.get(&restored).await.expect("record");
    assert_eq!(record.restore_from.as_deref(), Some(archive.as_path()));
    assert_eq!(record.image_ref, IMAGE, "made from the checkpoint's image");
    assert!(record
        .layer_dir
        .join("restore/checkpoint/inventory.img")
        .is_file());
    // The fake mount is no overlay: the diff lands in the rootfs dir.
    let merged = record.bundle.join("rootfs");
    assert_eq!(
        std::fs::read_to_string(merged.join("data/count")).expect("applied"),
        "41"
    );
    f.manager.remove(&restored).await.expect("remove");

    // Without the checkpoint's image: NotFound naming it.
    f.manager.images.remove(IMAGE).expect("remove image");
    let err = f.create_err(&pod_id, config).await;
    assert!(matches!(err, ContainerError::ImageNotFound { .. }), "{err}");
    assert!(err.to_string().contains(IMAGE), "{err}");
}

#[tokio::test]
async fn a_container_whose_devices_cannot_be_restricted_is_not_kept() {
    let f = fixture().await;
    let pod_id = f.pod("web", "").await;
    f.pods.cgroups.fail("restrict_devices");
    let err = f.create_err(&pod_id, container("app")).await;
    assert!(matches!(err, ContainerError::DeviceFilter { .. }), "{err}");
    assert!(
        err.to_string().contains("cannot restrict its devices"),
        "{err}"
    );
    // The shim made the container: it is killed and shut down, as after any
    // later step's failure.
    let entries = f.journal.entries();
    assert!(
        entries.contains(&"kill Number(9) all=true".to_string())
            && entries.contains(&"shutdown shim".to_string()),
        "{entries:?}"
    );
    assert_no_trace(&f, "restrict devices");
}

#[tokio::test]
async fn every_created_container_gets_its_device_filter() {
    let f = fixture().await;
    let pod_id = f.pod("web", "").await;
    let id = f.create_ok(&pod_id, container("app")).await;
    let record = f.manager.store.published(&id).expect("id").expect("record");
    let wanted = format!("restrict_devices {}", record.cgroup_dir());
    assert!(
        f.pods.cgroups.calls().contains(&wanted),
        "{:?}",
        f.pods.cgroups.calls()
    );
}

/// A fixture whose pods may name handler "runc": a stand-in runtime that
/// writes its arguments to `<dir>/runc.args`, its state root its own.
async fn runc_fixture() -> Fixture {
    use std::os::unix::fs::PermissionsExt;
    let pods = crate::sandbox::lifecycle_tests::fixture_with_handlers(|dir, handlers| {
        let runc = dir.join("runc");
        std::fs::write(
            &runc,
            format!("#!/bin/sh\necho \"$@\" >> {}/runc.args\n", dir.display()),
        )
        .expect("runc");
        std::fs::set_permissions(&runc, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        handlers
            .with(crate::runtime_handlers::RuntimeHandler {
                name: "runc".into(),
                binary: Some(runc.clone()),
                root: dir.join("state/runtimes/runc"),
                own_root: true,
                features: Default::default(),
                sandbox_image: None,
            })
            // A root the config named: perhaps another runtime's too.
            .with(crate::runtime_handlers::RuntimeHandler {
                name: "shared".into(),
                binary: Some(runc),
                root: dir.join("shared-root"),
                own_root: false,
                features: Default::default(),
                sandbox_image: None,
            })
    });
    fixture_on(pods).await
}

#[tokio::test]
async fn a_pods_handler_picks_the_runtime_and_state_root_its_shims_get() {
    let f = runc_fixture().await;
    let runc_pod = f.pod("fast", "runc").await;
    let default_pod = f.pod("web", "").await;
    let on_runc = f.create_ok(&runc_pod, container("app")).await;
    let on_default = f.create_ok(&default_pod, container("app")).await;
    let pods_dir = f.pods.dir.path();
    let launches = f.fake_shims.launches.lock().expect("launches").clone();
    assert_eq!(
        launches,
        [
            crate::fakes::LaunchSeen {
                id: on_runc.clone(),
                runtime_binary: Some(pods_dir.join("runc")),
                state_root: pods_dir.join("state/runtimes/runc"),
            },
            crate::fakes::LaunchSeen {
                id: on_default.clone(),
                runtime_binary: None,
                state_root: pods_dir.join("state/runtime"),
            },
        ]
    );
    // Recorded with the container, and in its journal's shim entry, for
    // remove and recovery.
    let record = f.manager.get(&on_runc).await.expect("record");
    assert_eq!(record.runtime_handler, "runc");
    let journal = super::journal::ContainerJournal::load(&record.bundle)
        .expect("journal")
        .expect("a journal");
    assert!(
        journal.entries.iter().any(|entry| matches!(entry,
            super::journal::ContainerResource::Shim { handler, .. } if handler == "runc")),
        "{:?}",
        journal.entries
    );
    assert_eq!(
        f.manager
            .get(&on_default)
            .await
            .expect("record")
            .runtime_handler,
        ""
    );
}

#[tokio::test]
async fn without_its_shim_a_container_is_removed_through_its_handlers_runtime() {
    let f = runc_fixture().await;
    let pod_id = f.pod("fast", "runc").await;
    let id = f.create_ok(&pod_id, container("app")).await;
    let record = f.manager.get(&id).await.expect("record");
    let state = f.pods.dir.path().join("state/runtimes/runc").join(&id);
    std::fs::create_dir_all(&state).expect("runtime state");
    f.manager.shims.kill_unrecorded(&record.shim_dir).await;
    f.manager.remove(&id).await.expect("remove");
    let args = std::fs::read_to_string(f.pods.dir.path().join("runc.args")).expect("runc ran");
    assert_eq!(
        args.trim(),
        format!(
            "--root {} delete --force {id}",
            f.pods.dir.path().join("state/runtimes/runc").display()
        )
    );
    assert!(!state.exists(), "the runtime's state is left");
    assert_no_trace(&f, "removed through runc");
}

#[tokio::test]
async fn a_handler_no_longer_configured_is_never_taken_for_the_default() {
    let f = runc_fixture().await;
    let pod_id = f.pod("fast", "runc").await;
    let id = f.create_ok(&pod_id, container("app")).await;
    // As a container of a berthd whose config had handler "gone".
    let handle = f.manager.find(&id).expect("find").expect("container");
    handle.lock().await.runtime_handler = "gone".into();
    let record = f.manager.get(&id).await.expect("record");
    let mut journal = super::journal::ContainerJournal::load(&record.bundle)
        .expect("journal")
        .expect("a journal");
    journal
        .change(|entries| {
            for entry in entries {
                if let super::journal::ContainerResource::Shim { handler, .. } = entry {
                    *handler = "gone".into();
                }
            }
        })
        .expect("journal");
    f.manager.shims.kill_unrecorded(&record.shim_dir).await;
    let err = f.manager.remove(&id).await.unwrap_err();
    assert!(
        matches!(&err, ContainerError::UnknownRuntimeHandler { handler, .. } if handler == "gone"),
        "{err}"
    );
    assert!(err.to_string().contains(&id), "{err}");
    // Kept, and kept by recovery, which reports it.
    assert!(f.manager.get(&id).await.is_ok());
    f.manager.recover().await;
    assert!(f.manager.get(&id).await.is_ok());
    assert!(record.bundle.exists());

    // A pod whose handler is gone gets no new container.
    let sandbox = f.pods.manager.get(&pod_id).expect("pod");
    sandbox.lock().await.runtime_handler = "gone".into();
    let err = f.create_err(&pod_id, container("other")).await;
    assert!(
        matches!(&err, ContainerError::UnknownRuntimeHandler { handler, .. } if handler == "gone"),
        "{err}"
    );
    assert!(err.to_string().contains(&pod_id), "{err}");
}

#[tokio::test]
async fn recovery_sweeps_unnamed_runtime_states_only_from_roots_berth_owns() {
    let f = runc_fixture().await;
    let pod_id = f.pod("fast", "runc").await;
    let kept = f.create_ok(&pod_id, container("kept")).await;
    let dir = f.pods.dir.path();
    let runc_root = dir.join("state/runtimes/runc");
    for state in [
        runc_root.join(&kept),
        runc_root.join("gone"),
        dir.join("shared-root/other"),
    ] {
        std::fs::create_dir_all(&state).expect("state");
    }
    assert_eq!(f.manager.recover().await, (0, 1));
    assert!(
        runc_root.join(&kept).exists(),
        "a recorded container's state"
    );
    assert!(
        !runc_root.join("gone").exists(),
        "an unnamed state in berth's root"
    );
    assert!(
        dir.join("shared-root/other").exists(),
        "a configured root is not berth's"
    );
    let args = std::fs::read_to_string(dir.join("runc.args")).expect("runc ran");
    assert_eq!(
        args.trim(),
        format!("--root {} delete --force gone", runc_root.display())
    );
}

#[tokio::test]
async fn a_checkpoint_is_not_restored_under_a_runtime_binary() {
    let f = runc_fixture().await;
    let pod_id = f.pod("fast", "runc").await;
    let id = f.create_ok(&pod_id, container("app")).await;
    f.manager.start(&id).await.expect("start");
    let record = f.manager.get(&id).await.expect("record");
    std::fs::create_dir_all(record.layer_dir.join("upper")).expect("upper");
    let archive = f.dir.path().join("ckpt.tar");
    f.manager
        .checkpoint(&id, &archive, Duration::ZERO)
        .await
        .expect("checkpoint");
    let config = of_image("restored", &archive.to_string_lossy());
    f.journal.clear();
    let err = f.create_err(&pod_id, config).await;
    assert!(
        matches!(&err, ContainerError::RestoreUnsupported { handler, .. } if handler == "runc"),
        "{err}"
    );
    assert!(f.journal.entries().is_empty(), "nothing was made");
}
