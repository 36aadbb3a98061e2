//! CreateContainer under fault injection: each step that can fail after
//! the first thing was made fails in turn, and nothing of the container
//! is left: no record, bundle, layer or shim dir, no rootfs mount, no
//! shim, no cgroup, no hold on the image's layers, and its name is free.

use cri_api::v1::{
    CdiDevice, ContainerConfig, ImageSpec, LinuxContainerSecurityContext, LinuxPodSandboxConfig,
    LinuxSandboxSecurityContext, NamespaceMode, NamespaceOption, PodSandboxConfig, UserNamespace,
};

use berth_cgroups::CgroupManager;

use super::journal::{ContainerJournal, ContainerResource};
use super::lifecycle_tests::{assert_no_trace, container, fixture, Fixture, IMAGE};
use crate::sandbox::lifecycle_tests::pod;

/// How a step is made to fail.
enum Fault {
    /// A fake's step, by its journal name.
    Step(&'static str),
    /// A cgroup manager call.
    Cgroup(&'static str),
    /// The image's config blob is not JSON.
    ImageConfig,
    /// The request asks for what cannot be given (the step fails by itself).
    Request,
}

struct Case {
    what: &'static str,
    fault: Fault,
    pod: fn() -> PodSandboxConfig,
    config: fn() -> ContainerConfig,
}

fn plain_pod() -> PodSandboxConfig {
    pod("web")
}

fn plain() -> ContainerConfig {
    container("app")
}

/// An image volume (of the container's own image) at `/vol`.
fn image_volume() -> ContainerConfig {
    let mut config = container("app");
    config.mounts.push(cri_api::v1::Mount {
        container_path: "/vol".into(),
        image: Some(ImageSpec {
            image: IMAGE.into(),
            ..Default::default()
        }),
        ..Default::default()
    });
    config
}

/// A CDI device no spec on the node names.
fn unknown_cdi_device() -> ContainerConfig {
    let mut config = container("app");
    config.cdi_devices = vec![CdiDevice {
        name: "vendor.example/gpu=none".into(),
    }];
    config
}

/// PID TARGET of a container that does not exist.
fn missing_target() -> ContainerConfig {
    let mut config = container("app");
    config.linux = Some(cri_api::v1::LinuxContainerConfig {
        security_context: Some(LinuxContainerSecurityContext {
            namespace_options: Some(NamespaceOption {
                pid: NamespaceMode::Target as i32,
                target_id: "no-such-container".into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    config
}

/// A pod with its own user namespace: its containers' binds are idmapped.
fn userns_pod() -> PodSandboxConfig {
    let mapping = vec![cri_api::v1::IdMapping {
        container_id: 0,
        host_id: 1_200_000,
        length: 65536,
    }];
    let mut config = pod("web");
    config.linux = Some(LinuxPodSandboxConfig {
        security_context: Some(LinuxSandboxSecurityContext {
            namespace_options: Some(NamespaceOption {
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
    config
}

/// Every step of a create, in the order it runs, that fails once the
/// container's dirs exist.
fn cases() -> Vec<Case> {
    let case = |what, fault, pod, config| Case {
        what,
        fault,
        pod,
        config,
    };
    vec![
        case(
            "rootfs mount",
            Fault::Step("mount rootfs"),
            plain_pod,
            plain,
        ),
        (case(
            "image volume mount",
            Fault::Step("mount image volume"),
            plain_pod,
            image_volume,
        )),
        case("PID target", Fault::Request, plain_pod, missing_target),
        case("image config", Fault::ImageConfig, plain_pod, plain),
        case("CDI device", Fault::Request, plain_pod, unknown_cdi_device),
        case(
            "idmapped bind",
            Fault::Step("idmap bind"),
            userns_pod,
            plain,
        ),
        case("shim launch", Fault::Step("launch shim"), plain_pod, plain),
        case(
            "device filter",
            Fault::Cgroup("restrict_devices"),
            plain_pod,
            plain,
        ),
    ]
}

/// Nothing of a failed create is left, beyond what `assert_no_trace` sees.
fn assert_nothing_left(f: &Fixture, what: &str, cgroups_before: &[String]) {
    assert_clean(f, what, cgroups_before);
    let entries = f.journal.entries();
    // Every rootfs mount tried (image volumes and idmapped views are
    // under it) was unmounted: journaled before the mount, a failed one
    // too.
    let mounted = entries.iter().any(|entry| entry == "mount rootfs");
    assert_eq!(
        entries.iter().any(|entry| entry == "unmount rootfs"),
        mounted,
        "{what}: {entries:?}"
    );
}

/// No record, dir, shim, cgroup or layer hold of a container is left.
fn assert_clean(f: &Fixture, what: &str, cgroups_before: &[String]) {
    assert_no_trace(f, what);
    for launch in f
        .fake_shims
        .launches
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .iter()
    {
        let dir = f.manager.shims_dir.join(&launch.id[..12]);
        assert!(!f.manager.shims.is_alive(&dir), "{what}: shim left");
    }
    assert_eq!(f.pods.cgroups.cgroups(), cgroups_before, "{what}: cgroups");
    assert!(
        f.manager
            .layer_leases
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .is_empty(),
        "{what}: layers still held"
    );
}

#[tokio::test]
async fn a_create_failing_at_any_step_leaves_nothing() {
    for case in cases() {
        let f = fixture().await;
        let pod_id = f
            .pods
            .manager
            .run((case.pod)(), "")
            .await
            .unwrap_or_else(|err| panic!("{}: pod: {err}", case.what));
        let cgroups_before = f.pods.cgroups.cgroups();
        let blob = f
            .manager
            .images
            .blob_path(&format!("sha256:{}", "a".repeat(64)))
            .expect("path");
        let good_blob = std::fs::read(&blob).expect("blob");
        match case.fault {
            Fault::Step(step) => f.journal.fail(step),
            Fault::Cgroup(op) => f.pods.cgroups.fail(op),
            Fault::ImageConfig => std::fs::write(&blob, b"not json").expect("corrupt"),
            Fault::Request => {}
        }
        f.journal.clear();
        let err = f
            .manager
            .create(&pod_id, (case.config)(), None)
            .await
            .expect_err(case.what);
        assert!(
            !matches!(err, super::ContainerError::NameReserved { .. }),
            "{}: {err}",
            case.what
        );
        assert_nothing_left(&f, case.what, &cgroups_before);
        // The name is free again: the same create works once nothing fails.
        if matches!(case.fault, Fault::Request) {
            continue;
        }
        f.journal.heal();
        f.pods.cgroups.heal();
        std::fs::write(&blob, good_blob).expect("blob");
        f.manager
            .create(&pod_id, (case.config)(), None)
            .await
            .unwrap_or_else(|err| panic!("{}: again: {err}", case.what));
    }
}

#[tokio::test]
async fn a_failed_create_whose_shim_hangs_leaves_nothing() {
    let f = fixture().await;
    let pod_id = f.pods.manager.run(plain_pod(), "").await.expect("pod");
    let cgroups_before = f.pods.cgroups.cgroups();
    // The create fails after the shim made the container, and the shim
    // answers neither the kill nor the shutdown of the undo.
    f.pods.cgroups.fail("restrict_devices");
    f.journal.fail("shim hangs at shutdown");
    f.journal.clear();
    f.manager
        .create(&pod_id, plain(), None)
        .await
        .expect_err("restrict_devices fails");
    let entries = f.journal.entries();
    assert!(
        entries.iter().any(|entry| entry == "kill unrecorded shim"),
        "the hung shim is killed: {entries:?}"
    );
    assert_nothing_left(&f, "a hung shim", &cgroups_before);
}

/// The journal of the one create left without a record.
fn unfinished(f: &Fixture) -> (String, ContainerJournal) {
    let ids = f.manager.store.unrecorded();
    assert_eq!(ids.len(), 1, "one unfinished create: {ids:?}");
    let journal = ContainerJournal::load(&f.manager.store.record_dir(&ids[0]))
        .expect("journal")
        .expect("a journal is kept");
    (ids[0].clone(), journal)
}

fn kinds(journal: &ContainerJournal) -> Vec<&'static str> {
    journal
        .entries
        .iter()
        .map(|entry| match entry {
            ContainerResource::Bundle { .. } => "bundle",
            ContainerResource::LayerDir { .. } => "layer dir",
            ContainerResource::ShimDir { .. } => "shim dir",
            ContainerResource::Layers => "layers",
            ContainerResource::Rootfs { .. } => "rootfs",
            ContainerResource::Shim { .. } => "shim",
        })
        .collect()
}

#[tokio::test]
async fn an_unmount_failing_in_a_failed_creates_undo_is_kept_and_recovery_finishes_it() {
    let f = fixture().await;
    let pod_id = f.pods.manager.run(plain_pod(), "").await.expect("pod");
    let cgroups_before = f.pods.cgroups.cgroups();
    f.pods.cgroups.fail("restrict_devices");
    f.journal.fail("unmount rootfs");
    f.manager
        .create(&pod_id, plain(), None)
        .await
        .expect_err("restrict_devices fails");
    // The shim went; the rootfs did not, so neither did anything made
    // before it (no directory is deleted through a mount).
    let (id, journal) = unfinished(&f);
    assert_eq!(
        kinds(&journal),
        ["bundle", "layer dir", "shim dir", "layers", "rootfs"]
    );
    assert!(f.manager.layers_dir.join(&id).exists());
    assert!(f
        .manager
        .layer_leases
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .contains_key(&id));
    // Its name is free: kubelet retries with a new id.
    f.journal.heal();
    f.pods.cgroups.heal();
    let again = f
        .manager
        .create(&pod_id, plain(), None)
        .await
        .expect("again");
    f.manager.remove(&again).await.expect("remove");
    // A recovery while the unmount still fails keeps it all.
    f.journal.fail("unmount rootfs");
    f.manager.recover().await;
    assert_eq!(kinds(&unfinished(&f).1), kinds(&journal));
    f.journal.heal();
    f.journal.clear();
    assert_eq!(f.manager.recover().await.0, 1);
    assert_eq!(f.journal.entries(), ["unmount rootfs"]);
    assert!(f.manager.store.unrecorded().is_empty());
    assert_clean(&f, "unmount failing in the undo", &cgroups_before);
}

#[tokio::test]
async fn a_cgroup_failing_in_a_failed_creates_undo_is_kept_and_recovery_finishes_it() {
    let f = fixture().await;
    let pod_id = f.pods.manager.run(plain_pod(), "").await.expect("pod");
    let cgroups_before = f.pods.cgroups.cgroups();
    // The shim hangs, so the undo kills its cgroup itself, and that fails.
    f.pods.cgroups.fail("restrict_devices");
    f.pods.cgroups.fail("kill");
    f.journal.fail("shim hangs at shutdown");
    f.manager
        .create(&pod_id, plain(), None)
        .await
        .expect_err("restrict_devices fails");
    let (_, journal) = unfinished(&f);
    assert_eq!(
        kinds(&journal),
        [
            "bundle",
            "layer dir",
            "shim dir",
            "layers",
            "rootfs",
            "shim"
        ]
    );
    let Some(ContainerResource::Shim { cgroup, .. }) = journal.entries.last().cloned() else {
        panic!("{:?}", journal.entries);
    };
    // The runtime had made the cgroup, and a process runs in it.
    f.pods.cgroups.create(&cgroup).expect("cgroup");
    f.pods.cgroups.put_process(&cgroup, 4711);
    f.pods.cgroups.heal();
    f.pods.cgroups.fail("remove");
    f.manager.recover().await;
    assert_eq!(kinds(&unfinished(&f).1), kinds(&journal), "removal failed");
    assert!(f.pods.cgroups.exists(&cgroup));
    f.pods.cgroups.heal();
    f.journal.heal();
    assert_eq!(f.manager.recover().await.0, 1);
    assert!(!f.pods.cgroups.exists(&cgroup));
    assert_clean(&f, "cgroup failing in the undo", &cgroups_before);
}

#[tokio::test]
async fn a_remove_whose_teardown_fails_keeps_the_container_and_the_next_finishes_it() {
    for fault in ["unmount rootfs", "remove cgroup"] {
        let f = fixture().await;
        let pod_id = f.pods.manager.run(plain_pod(), "").await.expect("pod");
        let cgroups_before = f.pods.cgroups.cgroups();
        let id = f
            .manager
            .create(&pod_id, plain(), None)
            .await
            .expect("create");
        let record = f.manager.get(&id).await.expect("record");
        match fault {
            "unmount rootfs" => f.journal.fail("unmount rootfs"),
            _ => {
                // Its shim is gone; its container's cgroup is not.
                f.manager.shims.kill_unrecorded(&record.shim_dir).await;
                f.pods.cgroups.create(record.cgroup_dir()).expect("cgroup");
                f.pods.cgroups.fail("remove");
            }
        }
        f.manager.remove(&id).await.expect_err(fault);
        // Still listed, with its record and what is left to undo.
        assert!(f.manager.get(&id).await.is_ok(), "{fault}");
        assert!(record.bundle.join("container.json").exists(), "{fault}");
        let journal = ContainerJournal::load(&record.bundle)
            .expect("journal")
            .expect("kept");
        let expected: &[&str] = match fault {
            "unmount rootfs" => &["bundle", "layer dir", "shim dir", "layers", "rootfs"],
            _ => &[
                "bundle",
                "layer dir",
                "shim dir",
                "layers",
                "rootfs",
                "shim",
            ],
        };
        assert_eq!(kinds(&journal), expected, "{fault}");
        f.journal.heal();
        f.pods.cgroups.heal();
        f.manager.remove(&id).await.expect("the next remove");
        assert_clean(&f, fault, &cgroups_before);
    }
}

#[tokio::test]
async fn recovery_undoes_a_create_journal_cut_after_each_step() {
    // Every prefix of a create's journal, the last step made or not.
    for cut in 1..=6 {
        for last_made in [true, false] {
            let what = format!("cut after {cut} entries, last made: {last_made}");
            let f = fixture().await;
            let pod_id = f.pods.manager.run(plain_pod(), "").await.expect("pod");
            let cgroups_before = f.pods.cgroups.cgroups();
            let sandbox = f.pods.manager.get(&pod_id).expect("pod");
            let parent = sandbox.lock().await.cgroup_parent.clone();
            let id = "c0ffee".repeat(10) + "abcd";
            let bundle = f.manager.store.record_dir(&id);
            let layer_dir = f.manager.layers_dir.join(&id);
            let shim_dir = f.manager.shims_dir.join(&id[..12]);
            let cgroup = berth_cgroups::container_cgroup(f.manager.sandboxes.driver, &parent, &id)
                .expect("cgroup")
                .path;
            let all = [
                ContainerResource::Bundle {
                    path: bundle.clone(),
                },
                ContainerResource::LayerDir {
                    path: layer_dir.clone(),
                },
                ContainerResource::ShimDir {
                    path: shim_dir.clone(),
                },
                ContainerResource::Layers,
                ContainerResource::Rootfs {
                    layer_dir: layer_dir.clone(),
                    bundle: bundle.clone(),
                },
                ContainerResource::Shim {
                    dir: shim_dir.clone(),
                    cgroup: cgroup.clone(),
                    handler: String::new(),
                },
            ];
            std::fs::create_dir_all(&bundle).expect("bundle");
            let mut journal = ContainerJournal::create(&bundle, &id).expect("journal");
            for (index, entry) in all.iter().enumerate().take(cut) {
                if index > 0 {
                    journal.append(entry.clone()).expect("append");
                }
                if index + 1 == cut && !last_made {
                    break;
                }
                match entry {
                    ContainerResource::Bundle { .. } => {}
                    ContainerResource::LayerDir { path } | ContainerResource::ShimDir { path } => {
                        std::fs::create_dir_all(path).expect("dir")
                    }
                    ContainerResource::Layers => f
                        .manager
                        .hold_layers(&id, &[format!("sha256:{}", "b".repeat(64))]),
                    ContainerResource::Rootfs { layer_dir, bundle } => f
                        .manager
                        .mounts
                        .mount(&[], &super::rootfs::RootfsPaths::new(layer_dir, bundle))
                        .expect("mount"),
                    ContainerResource::Shim { cgroup, .. } => {
                        // Its shim died with berthd; its container did not.
                        f.pods.cgroups.create(cgroup).expect("cgroup");
                        f.pods.cgroups.put_process(cgroup, 4711);
                    }
                }
            }
            f.journal.clear();
            assert_eq!(f.manager.recover().await.0, 1, "{what}");
            let entries = f.journal.entries();
            assert_eq!(
                entries.iter().any(|entry| entry == "unmount rootfs"),
                cut >= 5,
                "{what}: {entries:?}"
            );
            assert!(f.manager.store.unrecorded().is_empty(), "{what}");
            assert_clean(&f, &what, &cgroups_before);
        }
    }
}

#[tokio::test]
async fn recovery_undoes_an_older_berthds_unfinished_create_from_its_intent() {
    use crate::recovery::intent::{self, ContainerIntent};
    let f = fixture().await;
    let pod_id = f.pods.manager.run(plain_pod(), "").await.expect("pod");
    let cgroups_before = f.pods.cgroups.cgroups();
    let parent = f
        .pods
        .manager
        .get(&pod_id)
        .expect("pod")
        .lock()
        .await
        .cgroup_parent
        .clone();
    let id = "0dd".repeat(20) + "abcd";
    let intent = ContainerIntent {
        format: intent::FORMAT,
        id: id.clone(),
        bundle: f.manager.store.record_dir(&id),
        layer_dir: f.manager.layers_dir.join(&id),
        shim_dir: f.manager.shims_dir.join(&id[..12]),
        cgroup_path: berth_cgroups::container_cgroup(f.manager.sandboxes.driver, &parent, &id)
            .expect("cgroup")
            .path,
        runtime_handler: String::new(),
    };
    // All it names was made, and then the berthd died.
    for dir in [&intent.bundle, &intent.layer_dir, &intent.shim_dir] {
        std::fs::create_dir_all(dir).expect("dir");
    }
    intent::write(&intent.bundle, &intent).expect("intent");
    f.manager
        .mounts
        .mount(
            &[],
            &super::rootfs::RootfsPaths::new(&intent.layer_dir, &intent.bundle),
        )
        .expect("mount");
    f.pods.cgroups.create(&intent.cgroup_path).expect("cgroup");
    f.pods.cgroups.put_process(&intent.cgroup_path, 4711);
    // A first recovery that cannot unmount keeps the intent as a journal.
    f.journal.fail("unmount rootfs");
    f.manager.recover().await;
    let (_, journal) = unfinished(&f);
    assert_eq!(
        kinds(&journal),
        ["bundle", "layer dir", "shim dir", "layers", "rootfs"]
    );
    assert!(
        !f.pods.cgroups.exists(&intent.cgroup_path),
        "the shim's part went"
    );
    f.journal.heal();
    assert_eq!(f.manager.recover().await.0, 1);
    assert_clean(&f, "an older intent", &cgroups_before);
}

#[tokio::test]
async fn a_container_an_older_berthd_created_is_removed_from_a_journal_made_from_its_record() {
    let f = fixture().await;
    let pod_id = f.pods.manager.run(plain_pod(), "").await.expect("pod");
    let cgroups_before = f.pods.cgroups.cgroups();
    let id = f
        .manager
        .create(&pod_id, plain(), None)
        .await
        .expect("create");
    let record = f.manager.get(&id).await.expect("record");
    // An older berthd wrote no journal.
    std::fs::remove_file(record.bundle.join(super::journal::FILE)).expect("rm journal");
    // Its shim is gone and its cgroup is left: the made journal's shim
    // entry names the cgroup, and a failing removal keeps it written.
    f.manager.shims.kill_unrecorded(&record.shim_dir).await;
    f.pods.cgroups.create(record.cgroup_dir()).expect("cgroup");
    f.pods.cgroups.fail("remove");
    f.manager
        .remove(&id)
        .await
        .expect_err("cgroup removal fails");
    let journal = ContainerJournal::load(&record.bundle)
        .expect("journal")
        .expect("made from the record");
    assert_eq!(
        kinds(&journal),
        [
            "bundle",
            "layer dir",
            "shim dir",
            "layers",
            "rootfs",
            "shim"
        ]
    );
    f.pods.cgroups.heal();
    f.journal.clear();
    f.manager.remove(&id).await.expect("remove");
    assert!(f.journal.entries().contains(&"unmount rootfs".to_string()));
    assert_clean(&f, "an older record", &cgroups_before);
}
