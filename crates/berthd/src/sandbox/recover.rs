//! Sandboxes at start-up (see `crate::recovery`): a sandbox directory
//! without a record is a run that never finished, undone from its intent;
//! pins no sandbox names are released.

use std::path::{Path, PathBuf};

use berth_network::cni::NetworkConfigList;

use super::SandboxManager;
use crate::recovery::intent::{self, SandboxIntent};
use crate::recovery::remove_tree;

impl SandboxManager {
    /// Undoes unfinished runs and releases unnamed pins; returns how many
    /// runs were undone and how many other leftovers were swept.
    pub async fn recover(&self) -> (usize, usize) {
        self.report_unknown_handlers().await;
        let mut undone = 0;
        for id in self.store.unrecorded() {
            let dir = self.store.record_dir(&id);
            match intent::read::<SandboxIntent>(&dir) {
                Ok(Some(intent)) if intent.id == id => self.undo_intent(&intent).await,
                // Nothing is made before the intent is written.
                Ok(_) => {}
                Err(err) => {
                    tracing::warn!(sandbox = %id, error = %err, "recovery: left alone");
                    continue;
                }
            }
            remove_tree(&dir);
            undone += 1;
        }
        (undone, self.release_unnamed_pins())
    }

    /// Pods whose runtime handler the config no longer has are kept (they
    /// are stopped and removed as any other; their containers' runtime is
    /// unknown), each logged as an error naming it, never taken for the
    /// default handler.
    async fn report_unknown_handlers(&self) {
        for handle in self.store.all() {
            let record = handle.lock().await;
            if self.runtime_handlers.get(&record.runtime_handler).is_none() {
                tracing::error!(
                    sandbox = %record.id,
                    handler = %record.runtime_handler,
                    "recovery: the pod's runtime handler is not configured (runtime_handlers \
                     in the config); the pod is kept, no container can be created in it"
                );
            }
        }
    }

    /// What a run may have made, in reverse: processes, network, mounts,
    /// the cgroup. Each step is harmless if its object was never made.
    async fn undo_intent(&self, intent: &SandboxIntent) {
        tracing::info!(sandbox = %intent.id, "recovery: undoing a run that never finished");
        self.namespaces
            .kill_unrecorded(&intent.ns_dir, &intent.dir.join("root"))
            .await;
        if let Some(raw) = &intent.network_config {
            self.del_unrecorded_network(intent, raw).await;
        }
        self.namespaces.unmount(&intent.dir.join("shm"));
        self.release_pins(&intent.ns_dir);
        self.remove_cgroup_of_unrecorded(&intent.cgroup_path);
    }

    /// CNI DEL for a pod whose ADD may have run: it releases the IP and
    /// the veth. Without the pinned netns, plugins release what they
    /// allocated and skip the interface (CNI: DEL must tolerate that).
    async fn del_unrecorded_network(&self, intent: &SandboxIntent, raw: &str) {
        let network = match NetworkConfigList::from_slice(raw.as_bytes(), Path::new("(intent)")) {
            Ok(network) => network,
            Err(err) => {
                tracing::warn!(sandbox = %intent.id, error = %err, "recovery: saved CNI config");
                return;
            }
        };
        let pod = self.pod_network(&intent.id, &intent.config, &intent.ns_dir.join("net"));
        if let Err(err) = self.network.del(&network, &pod, None).await {
            tracing::warn!(sandbox = %intent.id, error = %err, "recovery: CNI DEL");
        }
    }

    /// Kills whatever is in a cgroup no record owns and removes it.
    fn remove_cgroup_of_unrecorded(&self, path: &str) {
        let _cgroups = self.lock_cgroups();
        if !self.cgroups.exists(path) {
            return;
        }
        if let Err(err) = self.cgroups.kill(path) {
            tracing::warn!(cgroup = %path, error = %err, "recovery: kill cgroup");
        }
        if let Err(err) = self.cgroups.remove(path) {
            tracing::warn!(cgroup = %path, error = %err, "recovery: remove cgroup");
        }
    }

    /// Unmounts and removes every pin in `ns_dir`, then the dir.
    fn release_pins(&self, ns_dir: &Path) {
        for pin in entries(ns_dir) {
            self.namespaces.unmount(&pin);
        }
        let _ = std::fs::remove_dir(ns_dir);
    }

    /// Pins of pods no record names: a RemovePodSandbox cut short after its
    /// record went, or a run whose sandbox dir is gone.
    fn release_unnamed_pins(&self) -> usize {
        let mut released = 0;
        for ns_dir in entries(&self.ns_dir) {
            // A sandbox dir still there (a record, loaded or not, or an
            // intent recovery left alone) keeps its pins.
            let named = ns_dir
                .file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|id| self.store.record_dir(id).exists());
            if !named {
                tracing::info!(dir = %ns_dir.display(), "recovery: releasing pins no sandbox names");
                self.release_pins(&ns_dir);
                released += 1;
            }
        }
        released
    }

    /// Removes cgroup parents berth made that nothing uses any more.
    pub fn remove_unused_parents(&self) {
        let _cgroups = self.lock_cgroups();
        if let Err(err) = self.parents.remove_unused_parents() {
            tracing::warn!(error = %err, "removing unused cgroup parents");
        }
    }
}

/// The entries of `dir`, none if it cannot be read.
fn entries(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| entries.flatten().map(|entry| entry.path()).collect())
        .unwrap_or_default()
}
