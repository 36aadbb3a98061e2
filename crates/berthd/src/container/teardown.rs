//! The one teardown of a container's host state: its journal walked in
//! reverse. The undo of a failed CreateContainer, RemoveContainer (after
//! its stop) and start-up recovery all call it; nothing else destroys what
//! a container made (but the shim's own delete when it answers, and
//! recovery's sweep of dirs no bundle names, which a RemoveContainer of an
//! older berthd may leave). Each undo is idempotent (gone already is
//! success), and its entry leaves the journal, durably, only once it
//! succeeded: the first failure stops the walk, keeping that entry and all
//! made before it, so the next teardown (the next Remove, or the next
//! start) finishes from there.

use std::path::Path;
use std::time::Duration;

use berth_shim_api::protocol::{Request, Response};

use super::journal::{ContainerJournal, ContainerResource};
use super::rootfs::RootfsPaths;
use super::{trash, ContainerError, ContainerManager};

impl ContainerManager {
    /// Undoes `journal`'s entries, last made first.
    pub(super) async fn tear_down(
        &self,
        journal: &mut ContainerJournal,
    ) -> Result<(), ContainerError> {
        while let Some(entry) = journal.entries.last().cloned() {
            if let Err(err) = self.undo_resource(&journal.id, &entry).await {
                tracing::warn!(container = %journal.id, resource = ?entry, error = %err,
                    "teardown: kept for the next attempt");
                return Err(err);
            }
            if matches!(entry, ContainerResource::Bundle { .. }) {
                // The journal went with the bundle.
                journal.entries.pop();
            } else {
                journal.change(|entries| {
                    entries.pop();
                })?;
            }
        }
        Ok(())
    }

    /// Undoes one resource; harmless if it was never made or is gone.
    async fn undo_resource(
        &self,
        id: &str,
        entry: &ContainerResource,
    ) -> Result<(), ContainerError> {
        match entry {
            ContainerResource::Bundle { path }
            | ContainerResource::LayerDir { path }
            | ContainerResource::ShimDir { path } => discard(path).await,
            ContainerResource::Layers => {
                self.release_layers(id);
                Ok(())
            }
            ContainerResource::Rootfs { layer_dir, bundle } => {
                // Never a directory deleted through a mount left: the
                // rootfs's entry is undone before its dirs'.
                let detached = self.mounts.unmount(&RootfsPaths::new(layer_dir, bundle))?;
                // Releasing the overlay syncs the disk its upper dir is on;
                // the container is gone from its path already, nothing
                // waits for that.
                tokio::task::spawn_blocking(move || drop(detached));
                Ok(())
            }
            ContainerResource::Shim {
                dir,
                cgroup,
                handler,
            } => self.undo_shim(id, dir, cgroup, handler).await,
        }
    }

    /// The shim's delete (it kills the container and removes its cgroup
    /// and runtime state, then exits); when it does not answer, or is
    /// gone, what its delete would have done: the shim killed, the cgroup
    /// killed and removed (under systemd its scope), the runtime's state
    /// removed from the handler's state root. A handler no longer
    /// configured leaves that root unknown: the entry is kept, the error
    /// names the container.
    async fn undo_shim(
        &self,
        id: &str,
        dir: &Path,
        cgroup: &str,
        handler: &str,
    ) -> Result<(), ContainerError> {
        let shutdown = self
            .shims
            .call(dir, Request::Shutdown, Duration::ZERO)
            .await;
        if matches!(shutdown, Ok(Response::Ok)) {
            return Ok(());
        }
        let runtime = self
            .sandboxes
            .runtime_handlers
            .get(handler)
            .ok_or_else(|| ContainerError::UnknownRuntimeHandler {
                what: format!("container {id}"),
                handler: handler.to_string(),
                action: "remove it",
            })?;
        self.shims.kill_unrecorded(dir).await;
        if !cgroup.is_empty() {
            self.on_cgroup_path(cgroup, "killing a cgroup", |cgroups, path| {
                cgroups.kill(path)
            })
            .await?;
            self.on_cgroup_path(cgroup, "removing a cgroup", |cgroups, path| {
                if cgroups.exists(path) {
                    cgroups.remove(path)
                } else {
                    Ok(())
                }
            })
            .await?;
        }
        runtime
            .remove_state(id)
            .await
            .map_err(|err| ContainerError::io("removing the container's runtime state", err))
    }
}

/// Moves `dir` to the trash and deletes it there in the background.
async fn discard(dir: &Path) -> Result<(), ContainerError> {
    match trash::discard(dir).await {
        Ok(moved) => {
            trash::purge(moved.into_iter().collect());
            Ok(())
        }
        Err(err) => Err(ContainerError::io(
            format!("removing {}", dir.display()),
            err,
        )),
    }
}
