//! The pod journal: every piece of host state a RunPodSandbox makes, in the
//! order it was made, each entry on disk before the step that makes it.
//! `teardown.rs` walks it in reverse and is the only code that destroys a
//! pod's host state (the undo of a failed run, Stop/RemovePodSandbox,
//! start-up recovery). An entry leaves the journal only once its undo
//! succeeded, so a teardown cut short (an error, a crash) is finished by
//! the next one from what is left.
//!
//! It lives in the sandbox's directory (`journal.json`), rewritten whole,
//! atomically and durably, at each change. The directory itself is made
//! just before the first write; a sandbox directory with neither journal
//! nor record therefore holds nothing else, and recovery removes it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cri_api::v1::PodSandboxConfig;
use serde::{Deserialize, Serialize};

use super::store::{InfraProcess, SandboxRecord};
use crate::recovery::intent::SandboxIntent;

/// The file's name in the sandbox's directory.
pub const FILE: &str = "journal.json";

/// The format this berthd writes; a later one is left alone.
pub const FORMAT: u32 = 1;

/// One piece of host state a pod has. Adding a step to RunPodSandbox is one
/// variant here and one arm in `SandboxManager::undo_resource`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PodResource {
    /// The sandbox's directory: this journal, the record, the DNS files,
    /// the infra process's root. Always the first entry, undone last.
    SandboxDir { path: PathBuf },
    /// Where the pod's namespaces are pinned.
    NamespaceDir { path: PathBuf },
    /// The cgroup parent was ensured: removed once no cgroup uses it, if
    /// berth made it (`ParentTracker` knows).
    CgroupParent { path: String },
    /// The sandbox's own cgroup.
    Cgroup { path: String },
    /// berth-pinns' namespaces pinned in `dir`, and the infra process it
    /// forks (chrooted into `infra_root`) for a shared PID namespace.
    /// `pins` is `None` until berth-pinns answered: until then whatever it
    /// may have made is searched for.
    Namespaces {
        dir: PathBuf,
        infra_root: PathBuf,
        pins: Option<BTreeMap<String, PathBuf>>,
    },
    /// The infra process, identified (a reused pid is never killed).
    Infra { process: InfraProcess },
    /// The pod's /dev/shm tmpfs.
    Shm { path: PathBuf },
    /// The pod on its CNI network: the config list as read (DEL needs it
    /// even when ADD never answered: it may have allocated an IP) and,
    /// once ADD answered, its result (DEL's `prevResult`).
    Network {
        config: String,
        netns: PathBuf,
        result: Option<serde_json::Value>,
    },
    /// hostname, hosts and resolv.conf in `dir`, the sandbox's directory
    /// (a run of an older berthd; the directory goes with `SandboxDir`).
    DnsFiles { dir: PathBuf },
    /// The pod's own directory under the root dir, and hostname, hosts
    /// and resolv.conf in it. Entered before the directory is made.
    PodFiles { dir: PathBuf },
}

impl PodResource {
    /// Whether StopPodSandbox undoes it: the pod's processes and network
    /// go at stop; its files, mounts and cgroup at remove.
    pub fn goes_at_stop(&self) -> bool {
        match self {
            PodResource::Infra { .. } | PodResource::Network { .. } => true,
            PodResource::SandboxDir { .. }
            | PodResource::NamespaceDir { .. }
            | PodResource::CgroupParent { .. }
            | PodResource::Cgroup { .. }
            | PodResource::Namespaces { .. }
            | PodResource::Shm { .. }
            | PodResource::DnsFiles { .. }
            | PodResource::PodFiles { .. } => false,
        }
    }
}

/// A pod's journal.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PodJournal {
    pub format: u32,
    pub id: String,
    /// The request's config: the pod's CNI arguments at DEL.
    #[serde(with = "crate::state_store::proto_base64")]
    pub config: PodSandboxConfig,
    pub entries: Vec<PodResource>,
    /// The sandbox's directory, where the file is.
    #[serde(skip)]
    dir: PathBuf,
}

/// Errors of journal files.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("writing journal {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("journal {path}: {message}")]
    Unreadable { path: PathBuf, message: String },
    #[error("journal {path} has format {format}, newer than this berthd's {FORMAT}")]
    Newer { path: PathBuf, format: u32 },
}

impl PodJournal {
    /// A new journal in `dir` (made just before), naming it: written
    /// before anything else is made.
    pub fn create(dir: &Path, id: &str, config: &PodSandboxConfig) -> Result<Self, JournalError> {
        let journal = Self {
            format: FORMAT,
            id: id.to_string(),
            config: config.clone(),
            entries: vec![PodResource::SandboxDir {
                path: dir.to_path_buf(),
            }],
            dir: dir.to_path_buf(),
        };
        journal.save()?;
        Ok(journal)
    }

    /// Writes `entry`, durably, before the step that makes it: if the
    /// write fails the step must not run (and the entry is not kept).
    pub fn append(&mut self, entry: PodResource) -> Result<(), JournalError> {
        self.change(|entries| entries.push(entry))
    }

    /// Changes the entries (a step's result) and writes them durably; a
    /// failed write leaves them as they were.
    pub fn change(
        &mut self,
        change: impl FnOnce(&mut Vec<PodResource>),
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

    /// The journal in `dir`; `Ok(None)` when there is none.
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

    /// The journal of a pod an older berthd ran (it wrote a record and no
    /// journal): everything the record names, in the order a run makes it.
    pub fn from_record(record: &SandboxRecord, ns_dir: &Path) -> Self {
        let mut entries = vec![
            PodResource::SandboxDir {
                path: record.dir.clone(),
            },
            PodResource::NamespaceDir {
                path: ns_dir.to_path_buf(),
            },
            PodResource::CgroupParent {
                path: record.cgroup_parent.clone(),
            },
            PodResource::Cgroup {
                path: record.cgroup_path.clone(),
            },
            PodResource::Namespaces {
                dir: ns_dir.to_path_buf(),
                infra_root: record.dir.join("root"),
                pins: Some(
                    record
                        .namespaces
                        .iter()
                        .map(|(kind, path)| (kind.clone(), path.clone()))
                        .collect(),
                ),
            },
        ];
        if let Some(process) = &record.infra {
            entries.push(PodResource::Infra {
                process: process.clone(),
            });
        }
        if let Some(path) = &record.shm {
            entries.push(PodResource::Shm { path: path.clone() });
        }
        if let (true, Some(config)) = (record.network_attached, &record.network_config) {
            entries.push(PodResource::Network {
                config: config.clone(),
                netns: record.namespaces.get("net").cloned().unwrap_or_default(),
                result: record.cni_result.clone(),
            });
        }
        entries.push(match &record.files_dir {
            Some(dir) => PodResource::PodFiles { dir: dir.clone() },
            None => PodResource::DnsFiles {
                dir: record.dir.clone(),
            },
        });
        Self {
            format: FORMAT,
            id: record.id.clone(),
            config: record.config.clone(),
            entries,
            dir: record.dir.clone(),
        }
    }

    /// The journal of a run an older berthd never finished (it wrote an
    /// intent and no record): everything the intent says it may have made,
    /// none of it known to be made, so each is searched for.
    pub fn from_intent(intent: &SandboxIntent) -> Self {
        let mut entries = vec![
            PodResource::SandboxDir {
                path: intent.dir.clone(),
            },
            PodResource::NamespaceDir {
                path: intent.ns_dir.clone(),
            },
            PodResource::CgroupParent {
                path: String::new(),
            },
            PodResource::Cgroup {
                path: intent.cgroup_path.clone(),
            },
            PodResource::Namespaces {
                dir: intent.ns_dir.clone(),
                infra_root: intent.dir.join("root"),
                pins: None,
            },
            PodResource::Shm {
                path: intent.dir.join("shm"),
            },
        ];
        if let Some(config) = &intent.network_config {
            entries.push(PodResource::Network {
                config: config.clone(),
                netns: intent.ns_dir.join("net"),
                result: None,
            });
        }
        Self {
            format: FORMAT,
            id: intent.id.clone(),
            config: intent.config.clone(),
            entries,
            dir: intent.dir.clone(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_journal_reads_back_as_written_and_a_failed_write_keeps_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut journal =
            PodJournal::create(dir.path(), "p1", &PodSandboxConfig::default()).expect("create");
        journal
            .append(PodResource::Cgroup {
                path: "/berth/p1".into(),
            })
            .expect("append");
        let back = PodJournal::load(dir.path()).unwrap().unwrap();
        assert_eq!(back.entries, journal.entries);
        assert_eq!(back.dir(), dir.path());
        // The directory is gone: the entry cannot be written, so the step
        // it announces must not run, and it is not kept.
        let gone = dir.path().to_path_buf();
        drop(dir);
        assert!(journal
            .append(PodResource::Shm {
                path: gone.join("shm")
            })
            .is_err());
        assert_eq!(journal.entries.len(), 2);
    }

    #[test]
    fn a_newer_or_torn_journal_is_an_error_not_a_default() {
        let dir = tempfile::tempdir().unwrap();
        assert!(PodJournal::load(dir.path()).unwrap().is_none());
        std::fs::write(dir.path().join(FILE), b"{\"format\":1,").unwrap();
        assert!(matches!(
            PodJournal::load(dir.path()),
            Err(JournalError::Unreadable { .. })
        ));
        let mut journal =
            PodJournal::create(dir.path(), "p1", &PodSandboxConfig::default()).unwrap();
        journal.format = FORMAT + 1;
        journal.save().unwrap();
        assert!(matches!(
            PodJournal::load(dir.path()),
            Err(JournalError::Newer { .. })
        ));
    }
}
