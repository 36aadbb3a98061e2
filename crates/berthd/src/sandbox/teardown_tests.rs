//! The pod journal's teardown under failure: a step of Stop, Remove or of a
//! failed run's undo that fails is kept and finished by the next Remove or
//! the next start, and then nothing is left in the fakes: no lease,
//! process, mount, pin, cgroup or dir.

use super::journal::{self, PodJournal, PodResource};
use super::lifecycle_tests::{assert_no_trace, entries, fixture, pod, Fixture};
use super::store::SandboxState;
use super::SandboxError;
use crate::recovery::intent::{self, SandboxIntent};

/// The sandbox dirs a failed undo left (no record names them).
fn unrecorded(f: &Fixture) -> Vec<String> {
    f.manager.store.unrecorded()
}

/// A run whose CNI ADD fails and whose undo's DEL fails too.
async fn run_failing_in_add_and_del(f: &Fixture) -> String {
    f.journal.fail("cni add");
    f.journal.fail("cni del");
    let err = f.manager.run(pod("web"), "").await.unwrap_err();
    assert!(matches!(err, SandboxError::CniAdd { .. }), "{err}");
    // The lease and what was made before it are kept, with their journal.
    assert_eq!(f.network.leases().len(), 1);
    let left = unrecorded(f);
    assert_eq!(left.len(), 1, "the sandbox dir and its journal stay");
    let kept = PodJournal::load(&f.manager.store.record_dir(&left[0]))
        .expect("journal")
        .expect("a journal");
    assert!(
        matches!(kept.entries.last(), Some(PodResource::Network { .. })),
        "{:?}",
        kept.entries
    );
    f.journal.heal();
    left[0].clone()
}

#[tokio::test]
async fn a_del_failing_in_a_failed_runs_undo_is_finished_by_the_next_remove() {
    let f = fixture();
    let id = run_failing_in_add_and_del(&f).await;
    // The name is free meanwhile: kubelet retries the pod.
    let retried = f.manager.run(pod("web"), "").await.expect("retry");
    f.manager.remove(&retried).await.expect("remove");
    assert!(!f.manager.store.record_dir(&id).exists());
    assert_no_trace(&f, "after the next remove");
}

#[tokio::test]
async fn a_del_failing_in_a_failed_runs_undo_is_finished_at_the_next_start() {
    let f = fixture();
    run_failing_in_add_and_del(&f).await;
    assert_eq!(f.manager.recover().await, (1, 0));
    assert_no_trace(&f, "after recovery");
}

#[tokio::test]
async fn an_undo_that_fails_again_is_kept_again() {
    let f = fixture();
    run_failing_in_add_and_del(&f).await;
    f.journal.fail("cni del");
    f.manager.remove("no-such-pod").await.expect("unknown");
    assert_eq!(f.network.leases().len(), 1, "DEL failed: the lease is kept");
    assert_eq!(unrecorded(&f).len(), 1);
    f.journal.heal();
    f.manager.remove("no-such-pod").await.expect("unknown");
    assert_no_trace(&f, "after the second remove");
}

#[tokio::test]
async fn a_failed_stop_leaves_the_pod_not_ready_and_the_next_stop_finishes() {
    let f = fixture();
    let id = f.manager.run(pod("web"), "").await.expect("run");
    f.journal.fail("cni del");
    let err = f.manager.stop(&id).await.unwrap_err();
    assert!(matches!(err, SandboxError::CniDel { .. }), "{err}");
    let seen = f.manager.published(&id).expect("published");
    assert_eq!(seen.state, SandboxState::NotReady);
    assert!(seen.network_attached, "DEL has not run");
    assert_eq!(f.network.leases(), std::slice::from_ref(&id));
    f.journal.heal();
    f.journal.clear();
    f.manager.stop(&id).await.expect("stop again");
    // DEL comes first: the infra process was not killed by the failed
    // stop, the walk stopped at DEL.
    assert_eq!(f.journal.entries(), ["cni del", "kill infra"]);
    assert!(
        !f.manager
            .published(&id)
            .expect("published")
            .network_attached
    );
    assert!(f.network.leases().is_empty());
    f.manager.remove(&id).await.expect("remove");
    assert_no_trace(&f, "stop");
}

/// Each step of RemovePodSandbox failing in turn: the pod and its name stay,
/// and the next remove leaves nothing.
#[tokio::test]
async fn a_remove_failing_at_any_step_is_finished_by_the_next() {
    type Inject = fn(&Fixture);
    let cases: [(&str, Inject); 7] = [
        ("cni del", |f| f.journal.fail("cni del")),
        ("unmount shm", |f| f.journal.fail("unmount")),
        ("unmount pin 1", |f| f.journal.fail_after("unmount", 1)),
        ("unmount pin 2", |f| f.journal.fail_after("unmount", 2)),
        ("unmount pin 3", |f| f.journal.fail_after("unmount", 3)),
        ("unmount pin 4", |f| f.journal.fail_after("unmount", 4)),
        ("cgroup remove", |f| f.cgroups.fail("remove")),
    ];
    for (step, inject) in cases {
        let f = fixture();
        let id = f.manager.run(pod("web"), "").await.expect("run");
        inject(&f);
        f.manager.remove(&id).await.unwrap_err();
        let record = f.manager.get(&id).expect("the pod stays");
        assert_eq!(record.lock().await.state, SandboxState::NotReady, "{step}");
        assert!(
            matches!(
                f.manager.run(pod("web"), "").await,
                Err(SandboxError::NameReserved { .. })
            ),
            "{step}: the name stays reserved"
        );
        f.journal.heal();
        f.cgroups.heal();
        f.manager.remove(&id).await.expect("remove again");
        assert_no_trace(&f, step);
    }
}

/// A remove cut short (berthd killed) at any point: the next start keeps
/// the record, the next remove finishes it.
#[tokio::test]
async fn a_remove_cut_short_is_finished_by_the_next_after_a_restart() {
    let f = fixture();
    let id = f.manager.run(pod("web"), "").await.expect("run");
    f.journal.fail_after("unmount", 2);
    f.manager.remove(&id).await.unwrap_err();
    f.journal.heal();
    // A restart: the record and the journal are what is on disk.
    assert_eq!(f.manager.recover().await, (0, 0));
    let reloaded = super::store::SandboxStore::open(&f.dir.path().join("sandboxes")).expect("open");
    assert!(reloaded.find(&id).expect("find").is_some());
    f.manager.remove(&id).await.expect("remove");
    assert_no_trace(&f, "restart");
}

/// A pod an older berthd ran has a record and no journal: its remove
/// undoes all the record names.
#[tokio::test]
async fn a_pod_recorded_without_a_journal_is_removed_from_its_record() {
    let f = fixture();
    let id = f.manager.run(pod("web"), "").await.expect("run");
    std::fs::remove_file(f.manager.store.record_dir(&id).join(journal::FILE)).expect("rm");
    f.journal.clear();
    f.manager.remove(&id).await.expect("remove");
    let entries = f.journal.entries();
    assert_eq!(entries[..3], ["cni del", "kill infra", "unmount shm"]);
    assert_no_trace(&f, "no journal");
}

/// A run an older berthd never finished left an intent, no journal: the
/// next start undoes what it may have made, searching for each.
#[tokio::test]
async fn an_intent_of_an_older_berthd_is_undone_at_start() {
    let f = fixture();
    let id = f.manager.run(pod("web"), "").await.expect("run");
    let dir = f.manager.store.record_dir(&id);
    let record = f.manager.published(&id).expect("record");
    // What an older berthd killed just before writing the record left
    // (its pod files were in the sandbox dir).
    std::fs::remove_dir_all(f.dir.path().join("pods").join(&id)).expect("rm files");
    std::fs::remove_file(dir.join(journal::FILE)).expect("rm journal");
    std::fs::remove_file(dir.join("sandbox.json")).expect("rm record");
    f.manager.store.remove(&id);
    intent::write(
        &dir,
        &SandboxIntent {
            format: intent::FORMAT,
            id: id.clone(),
            cgroup_path: record.cgroup_path.clone(),
            dir: dir.clone(),
            ns_dir: f.dir.path().join("ns").join(&id),
            network_config: record.network_config.clone(),
            config: record.config.clone(),
        },
    )
    .expect("intent");
    f.journal.clear();
    assert_eq!(f.manager.recover().await, (1, 0));
    let mut seen = f.journal.entries();
    seen[3..].sort();
    assert_eq!(
        seen,
        [
            "cni del".to_string(),
            "unmount shm".to_string(),
            format!("kill unrecorded pinns and infra of {id}"),
            "unmount ipc".to_string(),
            "unmount net".to_string(),
            "unmount pid".to_string(),
            "unmount uts".to_string(),
        ]
    );
    assert_no_trace(&f, "intent");
    assert!(entries(&f.dir.path().join("sandboxes")).is_empty());
}

/// Drops `call` once the fakes saw `step`: berthd killed in that step.
async fn kill_during<T: Send + 'static>(f: &Fixture, step: &str, call: tokio::task::JoinHandle<T>) {
    while !f.journal.entries().iter().any(|entry| entry == step) {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    call.abort();
    assert!(call.await.is_err(), "{step}: the call was cut short");
}

/// berthd killed while a run's step ran (after it made its resource, before
/// it answered): no undo ran; the next start finds the journal and undoes it.
#[tokio::test]
async fn a_run_cut_short_in_a_step_is_undone_at_the_next_start() {
    for step in ["pin", "cni add"] {
        let f = fixture();
        f.journal.hang(step);
        let run = tokio::spawn({
            let manager = f.manager.clone();
            async move { manager.run(pod("web"), "").await }
        });
        kill_during(&f, step, run).await;
        assert!(
            !f.namespaces.live.processes().is_empty(),
            "{step}: the infra process runs"
        );
        f.journal.heal();
        assert_eq!(f.manager.recover().await, (1, 0), "{step}");
        f.manager.remove_unused_parents();
        assert_no_trace(&f, step);
    }
}

/// berthd killed while a remove's CNI DEL ran: the record stays, and the
/// next remove, after the restart, finishes it.
#[tokio::test]
async fn a_remove_cut_short_in_del_is_finished_after_the_next_start() {
    let f = fixture();
    let id = f.manager.run(pod("web"), "").await.expect("run");
    let closed = f.journal.del_gate.write().await;
    let remove = tokio::spawn({
        let manager = f.manager.clone();
        let id = id.clone();
        async move { manager.remove(&id).await }
    });
    kill_during(&f, "cni del", remove).await;
    drop(closed);
    assert_eq!(f.manager.recover().await, (0, 0));
    assert!(f
        .manager
        .store
        .record_dir(&id)
        .join("sandbox.json")
        .exists());
    f.manager.remove(&id).await.expect("remove");
    assert_no_trace(&f, "remove cut short");
}

/// A pod's hostname, hosts and resolv.conf are in its dir under the root
/// dir, not in the sandbox's (a tmpfs on a node, which kernels before 6.3
/// cannot idmap for a pod in a user namespace), and go with the pod.
#[tokio::test]
async fn a_pods_files_are_in_its_root_dir_and_go_with_its_remove() {
    let f = fixture();
    let id = f.manager.run(pod("web"), "").await.expect("run");
    let record = f.manager.published(&id).expect("record");
    let files = f.dir.path().join("pods").join(&id);
    assert_eq!(record.files_dir(), files);
    assert_eq!(entries(&files), ["hostname", "hosts", "resolv.conf"]);
    assert_eq!(
        std::fs::read_to_string(files.join("hostname")).expect("hostname"),
        "web\n"
    );
    let sandbox = entries(&f.manager.store.record_dir(&id));
    assert!(!sandbox.iter().any(|name| name == "hosts"), "{sandbox:?}");
    // Journaled as one resource, after the network (undone before it).
    let journal = PodJournal::load(&f.manager.store.record_dir(&id))
        .expect("load")
        .expect("journal");
    assert_eq!(
        journal.entries.last(),
        Some(&PodResource::PodFiles { dir: files.clone() })
    );
    // Stop keeps them: containers of a stopped pod may still be inspected.
    f.manager.stop(&id).await.expect("stop");
    assert!(files.join("hosts").exists());
    f.manager.remove(&id).await.expect("remove");
    assert!(!files.exists());
    assert_no_trace(&f, "remove");
}

/// The files dir cannot be made: the run fails and its undo takes the
/// rest, the entry written before the dir being harmless to undo.
#[tokio::test]
async fn a_pod_files_dir_that_cannot_be_made_fails_the_run_and_leaves_nothing() {
    let f = fixture();
    std::fs::write(f.dir.path().join("pods"), b"not a dir").expect("block");
    let err = f.manager.run(pod("web"), "").await.unwrap_err();
    assert!(err.to_string().contains("pod files dir"), "{err}");
    std::fs::remove_file(f.dir.path().join("pods")).expect("unblock");
    assert_no_trace(&f, "files dir");
    f.manager
        .run(pod("web"), "")
        .await
        .expect("the name is free");
}

/// berthd killed after a run wrote the pod's files, before its record:
/// the next start's teardown of the journal removes them.
#[tokio::test]
async fn recovery_removes_the_files_of_a_run_that_left_no_record() {
    let f = fixture();
    let id = f.manager.run(pod("web"), "").await.expect("run");
    let dir = f.manager.store.record_dir(&id);
    std::fs::remove_file(dir.join("sandbox.json")).expect("rm record");
    f.manager.store.remove(&id);
    // And a write cut short left its temporary file.
    let files = f.dir.path().join("pods").join(&id);
    std::fs::write(files.join(".hosts.1.0.tmp"), b"half").expect("tmp");
    assert_eq!(f.manager.recover().await, (1, 0));
    f.manager.remove_unused_parents();
    assert_no_trace(&f, "recovered");
}

/// After a reboot the state dir (a tmpfs) is empty and the root dir is
/// not: the files of pods no sandbox dir names are removed at start, those
/// of a pod that still has its sandbox dir kept.
#[tokio::test]
async fn recovery_removes_pod_files_no_sandbox_names() {
    let f = fixture();
    let kept = f.manager.run(pod("db"), "").await.expect("run");
    let stale = f.dir.path().join("pods").join("0123abcd");
    std::fs::create_dir_all(&stale).expect("stale");
    std::fs::write(stale.join("hosts"), b"127.0.0.1 localhost\n").expect("hosts");
    assert_eq!(f.manager.recover().await, (0, 1));
    assert!(!stale.exists());
    assert!(f.dir.path().join("pods").join(&kept).join("hosts").exists());
    assert_eq!(f.manager.recover().await, (0, 0));
    f.manager.remove(&kept).await.expect("remove");
    assert_no_trace(&f, "reboot");
}

/// A pod an older berthd ran keeps its files in its sandbox dir: its
/// record has no files dir, and it is served and removed from there.
#[tokio::test]
async fn an_older_pods_files_are_served_and_removed_from_its_sandbox_dir() {
    let f = fixture();
    let id = f.manager.run(pod("web"), "").await.expect("run");
    let dir = f.manager.store.record_dir(&id);
    let files = f.dir.path().join("pods").join(&id);
    // What an older berthd left: the files beside the record, a record
    // without `files_dir`, no journal.
    for name in ["hostname", "hosts", "resolv.conf"] {
        std::fs::rename(files.join(name), dir.join(name)).expect("move");
    }
    std::fs::remove_dir(&files).expect("rm files dir");
    std::fs::remove_file(dir.join(journal::FILE)).expect("rm journal");
    let mut json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("sandbox.json")).expect("read"))
            .expect("json");
    json.as_object_mut().expect("object").remove("files_dir");
    std::fs::write(dir.join("sandbox.json"), json.to_string()).expect("write");
    let reloaded = super::store::SandboxStore::open(&f.dir.path().join("sandboxes")).expect("open");
    let old = reloaded.published(&id).expect("find").expect("the record");
    assert_eq!(old.files_dir, None);
    assert_eq!(old.files_dir(), dir);
    f.manager.store.insert((*old).clone());
    let journal = PodJournal::from_record(&old, &f.dir.path().join("ns").join(&id));
    assert_eq!(
        journal.entries.last(),
        Some(&PodResource::DnsFiles { dir: dir.clone() })
    );
    f.manager.remove(&id).await.expect("remove");
    assert_no_trace(&f, "older pod");
}
