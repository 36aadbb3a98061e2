//! Containers at start-up (see `crate::recovery`): a container directory
//! without a record is a create that never finished (or whose undo
//! failed), torn down from its journal (an older berthd's intent is made
//! into one); shim dirs, layer dirs and runtime states no record names are
//! swept (in the state roots berth owns). A container whose runtime
//! handler is no longer configured is kept and reported, never taken for
//! the default handler's.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use super::journal::ContainerJournal;
use super::rootfs::RootfsPaths;
use super::trash::TRASH_DIR;
use super::ContainerError;
use super::ContainerManager;
use crate::recovery::intent::{self, ContainerIntent};
use crate::recovery::remove_tree;

impl ContainerManager {
    /// Undoes unfinished creates and sweeps unnamed leftovers; returns how
    /// many creates were undone and how many other leftovers were swept.
    pub async fn recover(&self) -> (usize, usize) {
        self.hold_recorded_layers().await;
        self.report_unknown_handlers().await;
        let mut undone = 0;
        for id in self.store.unrecorded() {
            let bundle = self.store.record_dir(&id);
            match unrecorded_journal(&id, &bundle) {
                Ok(Some(mut journal)) => {
                    tracing::info!(container = %id, "recovery: undoing a create that never finished");
                    if let Err(err) = self.tear_down(&mut journal).await {
                        tracing::warn!(container = %id, error = %err,
                            "recovery: kept for the next start");
                    }
                }
                // Nothing is made before the journal is written.
                Ok(None) => remove_tree(&bundle),
                Err(err) => {
                    tracing::warn!(container = %id, error = %err, "recovery: left alone");
                    continue;
                }
            }
            undone += 1;
        }
        (undone, self.sweep_unnamed().await)
    }

    /// Containers whose handler the config no longer has: kept as they
    /// are (their runtime and its state root are unknown), each logged as
    /// an error naming it; removing one fails naming it too.
    async fn report_unknown_handlers(&self) {
        for handle in self.store.all() {
            let record = handle.lock().await;
            if self
                .sandboxes
                .runtime_handlers
                .get(&record.runtime_handler)
                .is_none()
            {
                tracing::error!(
                    container = %record.id,
                    handler = %record.runtime_handler,
                    "recovery: the container's runtime handler is not configured \
                     (runtime_handlers in the config); it is kept, but cannot be \
                     removed without its shim until the handler is configured again"
                );
            }
        }
    }

    /// Every container keeps its layers (records from before layers were
    /// kept name them through their image, if it is still there).
    async fn hold_recorded_layers(&self) {
        for handle in self.store.all() {
            let record = handle.lock().await;
            let layers = if record.layers.is_empty() {
                self.images
                    .resolve(&record.image_id)
                    .map(|image| {
                        image
                            .layers
                            .into_iter()
                            .map(|layer| layer.diff_id)
                            .collect()
                    })
                    .unwrap_or_default()
            } else {
                record.layers.clone()
            };
            self.hold_layers(&record.id, &layers);
        }
    }

    /// Shim dirs, layer dirs and runtime states no record names: what a
    /// RemoveContainer cut short had already moved out from under its
    /// record. A shim still serving such a dir is killed first. Runtime
    /// states only in roots berth owns: a root the config names may hold
    /// another runtime's containers.
    async fn sweep_unnamed(&self) -> usize {
        let mut shim_dirs = HashSet::new();
        for handle in self.store.all() {
            shim_dirs.insert(handle.lock().await.shim_dir.clone());
        }
        // Unfinished creates are gone by now: every container dir left is
        // a record's, loaded or not, or a journal's whose teardown failed
        // (what it names is its own), or one recovery left alone.
        let ids: HashSet<String> = entries(&self.store.record_dir(""))
            .iter()
            .filter_map(|dir| dir.file_name()?.to_str().map(str::to_string))
            .collect();
        let mut swept = 0;
        // Which shim a record that did not load uses is unknown: then no
        // shim dir is swept.
        let all_loaded = ids.len() == shim_dirs.len();
        for dir in entries(&self.shims_dir).into_iter().filter(|_| all_loaded) {
            if !shim_dirs.contains(&dir) {
                tracing::info!(dir = %dir.display(), "recovery: shim dir no container names");
                self.shims.kill_unrecorded(&dir).await;
                remove_tree(&dir);
                swept += 1;
            }
        }
        for dir in entries(&self.layers_dir) {
            let Some(name) = dir.file_name().and_then(|name| name.to_str()) else {
                continue;
            };
            if ids.contains(name) {
                continue;
            }
            tracing::info!(dir = %dir.display(), "recovery: dir no container names");
            // A layer dir may hold idmapped views of image layers a crash
            // left mid-mount: deleting through one would delete the
            // image's files.
            let paths = RootfsPaths::new(&dir, &self.store.record_dir(name));
            if let Err(err) = self.mounts.unmount(&paths) {
                tracing::warn!(dir = %dir.display(), error = %err, "recovery: unmount layer views");
                continue;
            }
            remove_tree(&dir);
            swept += 1;
        }
        for handler in self.sandboxes.runtime_handlers.all() {
            if !handler.own_root {
                continue;
            }
            for dir in entries(&handler.root) {
                let Some(name) = dir.file_name().and_then(|name| name.to_str()) else {
                    continue;
                };
                if ids.contains(name) {
                    continue;
                }
                tracing::info!(dir = %dir.display(), handler = %handler.name, "recovery: runtime state no container names");
                if let Err(err) = handler.remove_state(name).await {
                    tracing::warn!(dir = %dir.display(), error = %err, "recovery: remove dir");
                }
                swept += 1;
            }
        }
        swept
    }
}

/// The directories in `dir`, the trash excepted (purged on its own).
fn entries(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_dir()))
                .filter(|entry| entry.file_name() != TRASH_DIR)
                .map(|entry| entry.path())
                .collect()
        })
        .unwrap_or_default()
}

/// The journal of an unrecorded bundle: its own, or one made from the
/// intent an older berthd wrote (kept as the journal from then on). One
/// naming another container is left alone.
fn unrecorded_journal(id: &str, bundle: &Path) -> Result<Option<ContainerJournal>, ContainerError> {
    let journal = match ContainerJournal::load(bundle)? {
        Some(journal) => Some(journal),
        None => match intent::read::<ContainerIntent>(bundle)? {
            Some(intent) => {
                let journal = ContainerJournal::from_intent(&intent);
                journal.save()?;
                Some(journal)
            }
            None => None,
        },
    };
    match journal {
        Some(journal) if journal.id != id => Err(ContainerError::io(
            format!("journal in {}", bundle.display()),
            std::io::Error::other(format!("it names container {}", journal.id)),
        )),
        journal => Ok(journal),
    }
}
