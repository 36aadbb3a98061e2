//! Sandboxes at start-up (see `crate::recovery`): a sandbox directory
//! without a record is a run that never finished (or whose undo failed),
//! torn down from its journal, or from the intent an older berthd wrote;
//! pins and pod files dirs no sandbox names are released.

use std::path::Path;

use super::journal::PodJournal;
use super::teardown::{entries, Scope};
use super::{SandboxError, SandboxManager};
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
            let journal = match self.unrecorded_journal(&id, &dir) {
                Ok(journal) => journal,
                Err(err) => {
                    tracing::warn!(sandbox = %id, error = %err, "recovery: left alone");
                    continue;
                }
            };
            match journal {
                Some(mut journal) => {
                    tracing::info!(sandbox = %id, "recovery: undoing a run that never finished");
                    if self.tear_down(&mut journal, Scope::All).await.is_err() {
                        // Kept, for the next RemovePodSandbox or start.
                        self.note_unfinished_run(&id).await;
                        continue;
                    }
                }
                // Nothing is made before the journal is written.
                None => remove_tree(&dir),
            }
            undone += 1;
        }
        (
            undone,
            self.release_unnamed_pins() + self.remove_unnamed_pod_files(),
        )
    }

    /// The journal of an unrecorded sandbox dir: its own, or one made from
    /// the intent an older berthd wrote (kept as the journal from then on).
    fn unrecorded_journal(&self, id: &str, dir: &Path) -> Result<Option<PodJournal>, SandboxError> {
        let journal = match PodJournal::load(dir)? {
            Some(journal) => Some(journal),
            None => match intent::read::<SandboxIntent>(dir)? {
                Some(intent) => {
                    let journal = PodJournal::from_intent(&intent);
                    journal.save()?;
                    Some(journal)
                }
                None => None,
            },
        };
        match journal {
            Some(journal) if journal.id != id => Err(SandboxError::ForeignJournal {
                dir: dir.to_path_buf(),
                id: journal.id,
            }),
            journal => Ok(journal),
        }
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

    /// Unmounts and removes every pin in `ns_dir`, then the dir.
    fn release_pins(&self, ns_dir: &Path) {
        for pin in entries(ns_dir) {
            if let Err(err) = self.namespaces.unmount(&pin) {
                tracing::warn!(error = %err, "recovery: releasing a pin");
            }
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

    /// Pod files dirs no sandbox dir names: those of every pod before a
    /// reboot (the root dir is on disk, the state dir a tmpfs), or of a
    /// removal cut short after its sandbox dir went.
    fn remove_unnamed_pod_files(&self) -> usize {
        let mut removed = 0;
        for dir in entries(&self.pods_dir) {
            let named = dir
                .file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|id| self.store.record_dir(id).exists());
            if !named {
                tracing::info!(dir = %dir.display(), "recovery: removing pod files no sandbox names");
                remove_tree(&dir);
                removed += 1;
            }
        }
        removed
    }

    /// Removes cgroup parents berth made that nothing uses any more.
    pub fn remove_unused_parents(&self) {
        let _cgroups = self.lock_cgroups();
        if let Err(err) = self.parents.remove_unused_parents() {
            tracing::warn!(error = %err, "removing unused cgroup parents");
        }
    }
}
