//! The container journal: every piece of host state a CreateContainer
//! makes, in the order it is made, each entry on disk before the step that
//! makes it. `teardown.rs` walks it in reverse and is the only code that
//! destroys a container's host state (the undo of a failed create,
//! RemoveContainer, start-up recovery). An entry leaves the journal only
//! once its undo succeeded, so a teardown cut short is finished by the next
//! one from what is left.
//!
//! It lives in the container's bundle (`<state_dir>/containers/<id>/
//! journal.json`), where the intent lived and the record lives: the bundle
//! is the first thing a create makes and the last its teardown removes, so
//! recovery finds an unfinished create (a bundle with a journal and no
//! record) where it always looked, and a removed bundle takes the journal
//! with it. A bundle with neither journal nor record holds nothing else.
//!
//! Not in it: the name reservation (in memory only: records reserve their
//! names again at start-up, a create without a record has none to free);
//! image volumes, idmapped layer views and idmapped binds (each is mounted
//! in a directory of the rootfs's, `RootfsPaths`, and the rootfs's unmount
//! lists and unmounts them all: one entry, `Rootfs`, made before the first
//! of them); a restore's unpacked archive (in the layer dir); the device
//! filter (state of the container's cgroup, gone with it).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::store::ContainerRecord;
use crate::recovery::intent::ContainerIntent;
pub use crate::sandbox::journal::JournalError;

/// The file's name in the container's bundle.
pub const FILE: &str = "journal.json";

/// The format this berthd writes; a later one is left alone.
pub const FORMAT: u32 = 1;

/// One piece of host state a container has. Adding a step to
/// CreateContainer is one variant here and one arm in
/// `ContainerManager::undo_resource`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ContainerResource {
    /// The bundle: this journal, the record, the spec, the rootfs's mount
    /// point. Always the first entry, undone last.
    Bundle { path: PathBuf },
    /// The rootfs's upper and work dirs (and a restore's unpacked archive).
    LayerDir { path: PathBuf },
    /// The shim's directory: its socket, pid files, exit file and logs.
    ShimDir { path: PathBuf },
    /// The container's hold on its image's (and image volumes') layers, in
    /// memory: RemoveImage must not collect what is mounted.
    Layers,
    /// The overlay rootfs, with the image volumes and idmapped views
    /// mounted in its directories.
    Rootfs { layer_dir: PathBuf, bundle: PathBuf },
    /// The shim and what it makes: the container (its processes), its
    /// cgroup (with the device filter) and its runtime's state under the
    /// pod's runtime handler (`""`: the default), all of which the shim's
    /// delete removes when it answers.
    Shim {
        dir: PathBuf,
        cgroup: String,
        #[serde(default)]
        handler: String,
    },
}

/// A container's journal.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ContainerJournal {
    pub format: u32,
    pub id: String,
    pub entries: Vec<ContainerResource>,
    /// The bundle, where the file is.
    #[serde(skip)]
    dir: PathBuf,
}

impl ContainerJournal {
    /// A new journal in the bundle `dir` (made just before), naming it:
    /// written before anything else is made.
    pub fn create(dir: &Path, id: &str) -> Result<Self, JournalError> {
        let journal = Self {
            format: FORMAT,
            id: id.to_string(),
            entries: vec![ContainerResource::Bundle {
                path: dir.to_path_buf(),
            }],
            dir: dir.to_path_buf(),
        };
        journal.save()?;
        Ok(journal)
    }

    /// Writes `entry`, durably, before the step that makes it: if the
    /// write fails the step must not run (and the entry is not kept).
    pub fn append(&mut self, entry: ContainerResource) -> Result<(), JournalError> {
        self.change(|entries| entries.push(entry))
    }

    /// Changes the entries and writes them durably; a failed write leaves
    /// them as they were.
    pub fn change(
        &mut self,
        change: impl FnOnce(&mut Vec<ContainerResource>),
    ) -> Result<(), JournalError> {
        let before = self.entries.clone();
        change(&mut self.entries);
        self.save().inspect_err(|_| self.entries = before)
    }

    pub fn save(&self) -> Result<(), JournalError> {
        let path = self.dir.join(FILE);
        let bytes = serde_json::to_vec(self).map_err(|err| JournalError::Write {
            path: path.clone(),
            source: std::io::Error::other(err),
        })?;
        berth_atomic_file::write_atomic(&path, &bytes, 0o600)
            .map_err(|source| JournalError::Write { path, source })
    }

    /// The journal in the bundle `dir`; `Ok(None)` when there is none.
    pub fn load(dir: &Path) -> Result<Option<Self>, JournalError> {
        let path = dir.join(FILE);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(err) => {
                return Err(JournalError::Unreadable {
                    path,
                    message: err.to_string(),
                })
            }
        };
        let mut journal: Self =
            serde_json::from_slice(&bytes).map_err(|err| JournalError::Unreadable {
                path: path.clone(),
                message: err.to_string(),
            })?;
        if journal.format > FORMAT {
            return Err(JournalError::Newer {
                path,
                format: journal.format,
            });
        }
        journal.dir = dir.to_path_buf();
        Ok(Some(journal))
    }

    /// The journal of a container an older berthd created (a record and no
    /// journal): everything the record names, in the order a create makes
    /// it. RemoveContainer writes it before its teardown.
    pub fn from_record(record: &ContainerRecord) -> Self {
        Self::all_of(
            &record.id,
            &record.bundle,
            &record.layer_dir,
            &record.shim_dir,
            record.cgroup_dir(),
            &record.runtime_handler,
        )
    }

    /// The journal of a create an older berthd never finished (an intent
    /// and no record): everything the intent says it may have made, each
    /// undo harmless on what was never made.
    pub fn from_intent(intent: &ContainerIntent) -> Self {
        Self::all_of(
            &intent.id,
            &intent.bundle,
            &intent.layer_dir,
            &intent.shim_dir,
            &intent.cgroup_path,
            &intent.runtime_handler,
        )
    }

    fn all_of(
        id: &str,
        bundle: &Path,
        layer_dir: &Path,
        shim_dir: &Path,
        cgroup: &str,
        handler: &str,
    ) -> Self {
        Self {
            format: FORMAT,
            id: id.to_string(),
            entries: vec![
                ContainerResource::Bundle {
                    path: bundle.to_path_buf(),
                },
                ContainerResource::LayerDir {
                    path: layer_dir.to_path_buf(),
                },
                ContainerResource::ShimDir {
                    path: shim_dir.to_path_buf(),
                },
                ContainerResource::Layers,
                ContainerResource::Rootfs {
                    layer_dir: layer_dir.to_path_buf(),
                    bundle: bundle.to_path_buf(),
                },
                ContainerResource::Shim {
                    dir: shim_dir.to_path_buf(),
                    cgroup: cgroup.to_string(),
                    handler: handler.to_string(),
                },
            ],
            dir: bundle.to_path_buf(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_journal_reads_back_as_written_and_a_failed_write_keeps_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut journal = ContainerJournal::create(dir.path(), "c1").expect("create");
        journal.append(ContainerResource::Layers).expect("append");
        let back = ContainerJournal::load(dir.path()).unwrap().unwrap();
        assert_eq!(back.entries, journal.entries);
        assert_eq!(back.id, "c1");
        let gone = dir.path().to_path_buf();
        drop(dir);
        assert!(journal
            .append(ContainerResource::ShimDir {
                path: gone.join("shim")
            })
            .is_err());
        assert_eq!(journal.entries.len(), 2);
    }

    #[test]
    fn a_newer_or_torn_journal_is_an_error_not_a_default() {
        let dir = tempfile::tempdir().unwrap();
        assert!(ContainerJournal::load(dir.path()).unwrap().is_none());
        std::fs::write(dir.path().join(FILE), b"{\"format\":1,").unwrap();
        assert!(matches!(
            ContainerJournal::load(dir.path()),
            Err(JournalError::Unreadable { .. })
        ));
        let mut journal = ContainerJournal::create(dir.path(), "c1").unwrap();
        journal.format = FORMAT + 1;
        journal.save().unwrap();
        assert!(matches!(
            ContainerJournal::load(dir.path()),
            Err(JournalError::Newer { .. })
        ));
    }
}
