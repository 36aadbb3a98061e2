//! The one teardown of a pod's host state: its journal walked in reverse.
//! The undo of a failed RunPodSandbox, StopPodSandbox, RemovePodSandbox
//! and start-up recovery all call it; nothing else destroys what a pod
//! made. Each undo is idempotent (gone already is success), and its entry
//! leaves the journal, durably, only once it succeeded: the first failure
//! stops the walk, keeping that entry and all made before it, so the next
//! teardown (the next Remove, or the next start) finishes from there.

use std::collections::BTreeSet;
use std::path::Path;

use berth_network::cni::NetworkConfigList;

use super::journal::{self, PodJournal, PodResource};
use super::{SandboxError, SandboxManager};

/// How much of a pod goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scope {
    /// StopPodSandbox: processes and network ([`PodResource::goes_at_stop`]).
    Stop,
    /// Everything: the journal ends empty and the sandbox dir is gone.
    All,
}

/// The files `write_dns_files` makes.
const DNS_FILES: [&str; 3] = ["hostname", "hosts", "resolv.conf"];

/// Runs whose undo failed: their sandbox dir and journal stay (no record),
/// and the next RemovePodSandbox, or the next start, tears them down again.
#[derive(Debug, Default)]
pub struct UnfinishedRuns(tokio::sync::Mutex<BTreeSet<String>>);

impl SandboxManager {
    /// Undoes `journal`'s entries in `scope`, last made first.
    pub(super) async fn tear_down(
        &self,
        journal: &mut PodJournal,
        scope: Scope,
    ) -> Result<(), SandboxError> {
        let mut index = journal.entries.len();
        while index > 0 {
            index -= 1;
            let entry = journal.entries[index].clone();
            if scope == Scope::Stop && !entry.goes_at_stop() {
                continue;
            }
            if let Err(err) = self.undo_resource(journal, &entry).await {
                tracing::warn!(sandbox = %journal.id, resource = ?entry, error = %err,
                    "teardown: kept for the next attempt");
                return Err(err);
            }
            if matches!(entry, PodResource::SandboxDir { .. }) {
                // The journal went with its directory.
                journal.entries.remove(index);
            } else {
                journal.change(|entries| {
                    entries.remove(index);
                })?;
            }
        }
        Ok(())
    }

    /// Undoes one resource; harmless if it was never made or is gone.
    async fn undo_resource(
        &self,
        journal: &PodJournal,
        entry: &PodResource,
    ) -> Result<(), SandboxError> {
        match entry {
            PodResource::SandboxDir { path } => remove_sandbox_dir(path),
            PodResource::NamespaceDir { path } => match std::fs::remove_dir(path) {
                Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(SandboxError::io(
                    format!("namespace dir {}", path.display()),
                    err,
                )),
                _ => Ok(()),
            },
            PodResource::CgroupParent { .. } => {
                // Shared with other pods: ParentTracker removes only the
                // parents berth made that no cgroup uses; a failure there
                // is no leak of this pod's.
                let _cgroups = self.lock_cgroups();
                if let Err(err) = self.parents.remove_unused_parents() {
                    tracing::warn!(error = %err, "removing unused cgroup parents");
                }
                Ok(())
            }
            PodResource::Cgroup { path } => self.remove_cgroup(path),
            PodResource::Namespaces {
                dir,
                infra_root,
                pins,
            } => {
                let pins = match pins {
                    Some(pins) => pins.values().cloned().collect(),
                    None => {
                        // berth-pinns never answered: it, or the infra
                        // process it forked, may still run.
                        self.namespaces.kill_unrecorded(dir, infra_root).await;
                        entries(dir)
                    }
                };
                for pin in pins {
                    self.namespaces.unmount(&pin)?;
                }
                Ok(())
            }
            PodResource::Infra { process } => {
                self.namespaces.kill_and_wait(process).await;
                Ok(())
            }
            PodResource::Shm { path } => self.namespaces.unmount(path),
            PodResource::Network {
                config,
                netns,
                result,
            } => {
                self.del_network(journal, config, netns, result.as_ref())
                    .await
            }
            PodResource::DnsFiles { dir } => remove_pod_files(dir),
            // berth's own dir, holding only those files (and the temporary
            // file of a write a crash cut short): it goes whole. Never made
            // (its parent is missing, or not a dir) is gone already.
            PodResource::PodFiles { dir } => match std::fs::remove_dir_all(dir) {
                Err(err)
                    if !matches!(
                        err.kind(),
                        std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                    ) =>
                {
                    Err(SandboxError::io(
                        format!("pod files dir {}", dir.display()),
                        err,
                    ))
                }
                _ => Ok(()),
            },
        }
    }

    /// CNI DEL: releases the pod's IP and its veth. Without the pinned
    /// netns plugins release what they allocated and skip the interface
    /// (CNI: DEL must tolerate that).
    async fn del_network(
        &self,
        journal: &PodJournal,
        config: &str,
        netns: &Path,
        result: Option<&serde_json::Value>,
    ) -> Result<(), SandboxError> {
        let network = NetworkConfigList::from_slice(config.as_bytes(), Path::new("(saved)"))
            .map_err(|source| SandboxError::SavedCniConfig {
                id: journal.id.clone(),
                source: Box::new(source),
            })?;
        let pod = self.pod_network(&journal.id, &journal.config, netns);
        self.network
            .del(&network, &pod, result)
            .await
            .map_err(|source| SandboxError::CniDel {
                id: journal.id.clone(),
                source: Box::new(source),
            })
    }

    /// Removes the sandbox's cgroup; whatever still runs in it (a process
    /// of a run cut short) is killed first.
    fn remove_cgroup(&self, path: &str) -> Result<(), SandboxError> {
        let _cgroups = self.lock_cgroups();
        if !self.cgroups.exists(path) {
            return Ok(());
        }
        if self.cgroups.remove(path).is_ok() {
            return Ok(());
        }
        if let Err(err) = self.cgroups.kill(path) {
            tracing::warn!(cgroup = %path, error = %err, "kill cgroup");
        }
        self.cgroups
            .remove(path)
            .map_err(|source| SandboxError::Cgroup {
                path: path.to_string(),
                source: Box::new(source),
            })
    }

    /// The journal of a recorded pod: as written, or made from the record
    /// for a pod an older berthd ran (and then written, so a teardown's
    /// progress is kept).
    pub(super) fn journal_of(
        &self,
        record: &super::store::SandboxRecord,
    ) -> Result<PodJournal, SandboxError> {
        if let Some(journal) = PodJournal::load(&record.dir)? {
            return Ok(journal);
        }
        let journal = PodJournal::from_record(record, &self.ns_dir.join(&record.id));
        journal.save()?;
        Ok(journal)
    }

    /// Tears down a run whose undo failed: called by RemovePodSandbox, as
    /// kubelet never removes a pod it got no id for. One at a time; a
    /// call that finds another at it leaves it to that one.
    pub(super) async fn finish_unfinished_runs(&self) {
        let Ok(mut unfinished) = self.unfinished.0.try_lock() else {
            return;
        };
        let ids: Vec<String> = unfinished.iter().cloned().collect();
        for id in ids {
            let done = match PodJournal::load(&self.store.record_dir(&id)) {
                Ok(None) => true,
                Ok(Some(mut journal)) => self.tear_down(&mut journal, Scope::All).await.is_ok(),
                Err(err) => {
                    tracing::warn!(sandbox = %id, error = %err, "unfinished run: left alone");
                    false
                }
            };
            if done {
                tracing::info!(sandbox = %id, "finished undoing a failed run");
                unfinished.remove(&id);
            }
        }
    }

    /// Notes a run whose teardown failed, for [`Self::finish_unfinished_runs`].
    pub(super) async fn note_unfinished_run(&self, id: &str) {
        self.unfinished.0.lock().await.insert(id.to_string());
    }
}

/// Removes hostname, hosts and resolv.conf from `dir`.
fn remove_pod_files(dir: &Path) -> Result<(), SandboxError> {
    for name in DNS_FILES {
        let path = dir.join(name);
        match std::fs::remove_file(&path) {
            Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
                return Err(SandboxError::io(
                    format!("pod file {}", path.display()),
                    err,
                ))
            }
            _ => {}
        }
    }
    Ok(())
}

/// Removes the sandbox's directory with the journal last: a crash midway
/// leaves the journal (finished next time) or a directory with nothing
/// recovery needs to know.
fn remove_sandbox_dir(dir: &Path) -> Result<(), SandboxError> {
    let failed =
        |err: std::io::Error| SandboxError::io(format!("sandbox dir {}", dir.display()), err);
    for path in entries(dir) {
        if path.file_name() == Some(std::ffi::OsStr::new(journal::FILE)) {
            continue;
        }
        let removed = if path.is_dir() && !path.is_symlink() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        match removed {
            Err(err) if err.kind() != std::io::ErrorKind::NotFound => return Err(failed(err)),
            _ => {}
        }
    }
    match std::fs::remove_dir_all(dir) {
        Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(failed(err)),
        _ => Ok(()),
    }
}

/// The entries of `dir`, none if it cannot be read.
pub(super) fn entries(dir: &Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| entries.flatten().map(|entry| entry.path()).collect())
        .unwrap_or_default()
}
