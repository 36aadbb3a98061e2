//! Which cgroup parents berth created, so it removes those and only those.
//!
//! kubelet creates pod cgroups itself, but crictl and critest send parents
//! that do not exist, and an empty parent means berth's default (`/berth`).
//! berth creates such parents; it must remove them once they are empty, and
//! must never remove a parent it did not create. [`ParentTracker`] records
//! every cgroup level it creates in a JSON state file (under `/run/berth`, as
//! cgroups do not survive a reboot either) and removes only those, only when
//! empty, deepest first.

use std::collections::BTreeSet;
use std::fs::{self};
use std::io::{self};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};

use crate::manager::{relative, CgroupError, CgroupManager};

/// Version of the state file format.
const STATE_VERSION: u32 = 1;

/// The state file's content.
#[derive(Debug, Serialize, Deserialize)]
struct StateFile {
    version: u32,
    /// Cgroup paths berth created, e.g. `/berth`.
    created: Vec<String>,
}

/// Creates cgroup parents on demand and remembers which ones it created.
///
/// Calls on one tracker are serialized. A child must be created under a
/// parent only after [`ParentTracker::ensure`] and before the next
/// [`ParentTracker::remove_unused_parents`] runs, so call both from the same
/// place that creates and removes sandboxes (berthd's sandbox lock); a
/// parent removed in between would be recreated untracked by the child's
/// creation.
///
/// ```
/// use std::sync::Arc;
/// use berth_cgroups::{fake::FakeManager, CgroupManager, ParentTracker};
///
/// let manager = Arc::new(FakeManager::with_existing(&["/kubepods"]));
/// let dir = tempfile::tempdir()?;
/// let tracker = ParentTracker::open(manager.clone(), dir.path().join("cgroup-parents.json"))?;
///
/// // kubelet's parent exists: nothing is recorded. berth's default is created.
/// assert!(tracker.ensure("/kubepods")?.is_empty());
/// assert_eq!(tracker.ensure("/berth")?, vec!["/berth".to_string()]);
/// manager.create("/berth/sandbox1")?;
///
/// // In use: kept. Once its last child is gone: removed.
/// assert!(tracker.remove_unused_parents()?.is_empty());
/// manager.remove("/berth/sandbox1")?;
/// assert_eq!(tracker.remove_unused_parents()?, vec!["/berth".to_string()]);
/// assert!(manager.exists("/kubepods"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct ParentTracker {
    manager: Arc<dyn CgroupManager>,
    state_file: PathBuf,
    created: Mutex<BTreeSet<String>>,
}

impl std::fmt::Debug for ParentTracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParentTracker")
            .field("state_file", &self.state_file)
            .field("created", &*self.lock())
            .finish_non_exhaustive()
    }
}

impl ParentTracker {
    /// Loads the records from `state_file` (none if it does not exist) and
    /// forgets parents that no longer exist, e.g. after a reboot.
    pub fn open(
        manager: Arc<dyn CgroupManager>,
        state_file: impl Into<PathBuf>,
    ) -> Result<Self, CgroupError> {
        let state_file = state_file.into();
        let mut created = load(&state_file)?;
        let before = created.len();
        created.retain(|path| manager.exists(path));
        let pruned = created.len() != before;
        let tracker = Self {
            manager,
            state_file,
            created: Mutex::new(created),
        };
        if pruned {
            tracker.save(&tracker.lock())?;
        }
        Ok(tracker)
    }

    /// Makes sure `parent` exists, creating it and any missing ancestors, and
    /// records each level this call created. Returns those levels, topmost
    /// first (empty if `parent` existed).
    pub fn ensure(&self, parent: &str) -> Result<Vec<String>, CgroupError> {
        let rel = relative(parent)?;
        let mut created = self.lock();
        let mut new = Vec::new();
        let mut level = String::new();
        for component in rel.split('/').filter(|c| !c.is_empty()) {
            level.push('/');
            level.push_str(component);
            // Recorded before it is made: a berthd killed in between still
            // knows to remove it (a record of a parent never made is
            // forgotten when it is found missing).
            let fresh = !self.manager.exists(&level) && created.insert(level.clone());
            if fresh {
                self.save(&created)?;
            }
            match (self.manager.ensure_parent(&level)?, fresh) {
                (true, _) => {
                    tracing::info!(parent = %level, "created cgroup parent");
                    if created.insert(level.clone()) {
                        self.save(&created)?;
                    }
                    new.push(level.clone());
                }
                // Someone else made it meanwhile: it is not berth's.
                (false, true) => {
                    created.remove(&level);
                    self.save(&created)?;
                }
                (false, false) => {}
            }
        }
        Ok(new)
    }

    /// The parents berth created and has not removed yet, sorted.
    pub fn created(&self) -> Vec<String> {
        self.lock().iter().cloned().collect()
    }

    /// Removes every recorded parent that has no processes and no child
    /// cgroups, deepest first (so `/berth/a` goes before `/berth`), and
    /// forgets those and any that disappeared. Parents berth did not create
    /// are never touched. Returns the removed parents.
    ///
    /// All parents are tried; if some failed, the first error is returned
    /// after the records are saved.
    pub fn remove_unused_parents(&self) -> Result<Vec<String>, CgroupError> {
        let mut created = self.lock();
        let mut removed = Vec::new();
        let mut changed = false;
        let mut first_error = None;
        for path in deepest_first(&created) {
            if !self.manager.exists(&path) {
                created.remove(&path);
                changed = true;
                continue;
            }
            match self.manager.remove_if_empty(&path) {
                Ok(true) => {
                    tracing::info!(parent = %path, "removed unused cgroup parent");
                    created.remove(&path);
                    changed = true;
                    removed.push(path);
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(parent = %path, error = %e, "cannot remove cgroup parent");
                    first_error.get_or_insert(e);
                }
            }
        }
        if changed {
            self.save(&created)?;
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(removed),
        }
    }

    fn lock(&self) -> MutexGuard<'_, BTreeSet<String>> {
        self.created.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes the records atomically: temp file, fsync, rename.
    fn save(&self, created: &BTreeSet<String>) -> Result<(), CgroupError> {
        let state = StateFile {
            version: STATE_VERSION,
            created: created.iter().cloned().collect(),
        };
        let json = serde_json::to_vec_pretty(&state).map_err(|source| CgroupError::State {
            file: self.state_file.clone(),
            source,
        })?;
        let dir = self.state_file.parent().unwrap_or(Path::new("."));
        fs::create_dir_all(dir)
            // Root's alone, as everything in berth's state dir: which pod
            // cgroups a node has is no other user's business.
            .and_then(|()| berth_atomic_file::write_atomic(&self.state_file, &json, 0o600))
            .map_err(|source| CgroupError::Io {
                op: "write",
                file: self.state_file.clone(),
                source,
            })
    }
}

/// Reads the records; a missing file means none.
fn load(file: &Path) -> Result<BTreeSet<String>, CgroupError> {
    let bytes = match fs::read(file) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(BTreeSet::new()),
        Err(source) => {
            return Err(CgroupError::Io {
                op: "read",
                file: file.to_path_buf(),
                source,
            })
        }
    };
    let state: StateFile = serde_json::from_slice(&bytes).map_err(|source| CgroupError::State {
        file: file.to_path_buf(),
        source,
    })?;
    // Records are only ever written by berth, but a path that does not
    // validate must never reach rmdir.
    let mut created = BTreeSet::new();
    for path in state.created {
        let rel = relative(&path)?;
        if !rel.is_empty() {
            created.insert(format!("/{rel}"));
        }
    }
    Ok(created)
}

/// The paths, deepest first; ties in path order.
fn deepest_first(paths: &BTreeSet<String>) -> Vec<String> {
    let mut sorted: Vec<String> = paths.iter().cloned().collect();
    sorted.sort_by(|a, b| {
        let depth = |p: &str| p.matches('/').count();
        depth(b).cmp(&depth(a)).then_with(|| a.cmp(b))
    });
    sorted
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::FakeManager;

    fn setup(existing: &[&str]) -> (Arc<FakeManager>, tempfile::TempDir, PathBuf) {
        let fake = Arc::new(FakeManager::with_existing(existing));
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("state/cgroup-parents.json");
        (fake, dir, file)
    }

    #[test]
    fn records_only_levels_it_created() {
        let (fake, _dir, file) = setup(&["/kubepods/burstable"]);
        let tracker = ParentTracker::open(fake.clone(), &file).unwrap();
        assert_eq!(
            tracker.ensure("/kubepods/burstable/pod1/x").unwrap(),
            vec!["/kubepods/burstable/pod1", "/kubepods/burstable/pod1/x"]
        );
        assert!(tracker
            .ensure("/kubepods/burstable/pod1/x")
            .unwrap()
            .is_empty());
        assert!(tracker.ensure("/kubepods").unwrap().is_empty());
        assert!(tracker.ensure("/").unwrap().is_empty());
        assert_eq!(
            tracker.created(),
            vec!["/kubepods/burstable/pod1", "/kubepods/burstable/pod1/x"]
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "the record is root's alone");
    }

    #[test]
    fn removes_created_parents_deepest_first_and_keeps_others() {
        let (fake, _dir, file) = setup(&["/kubepods"]);
        let tracker = ParentTracker::open(fake.clone(), &file).unwrap();
        tracker.ensure("/berth/a/b").unwrap();
        tracker.ensure("/kubepods/pod1").unwrap();
        let removed = tracker.remove_unused_parents().unwrap();
        assert_eq!(
            removed,
            vec!["/berth/a/b", "/berth/a", "/kubepods/pod1", "/berth"]
        );
        assert_eq!(fake.cgroups(), vec!["/kubepods"]);
        assert!(tracker.created().is_empty());
        // The calls went deepest first; "/kubepods" was never asked about.
        let calls = fake.calls();
        let removals: Vec<&String> = calls
            .iter()
            .filter(|c| c.starts_with("remove_if_empty"))
            .collect();
        assert_eq!(removals.len(), 4);
        assert!(!calls.contains(&"remove_if_empty /kubepods -> false".to_string()));
    }

    #[test]
    fn keeps_parents_in_use_until_empty() {
        let (fake, _dir, file) = setup(&[]);
        let tracker = ParentTracker::open(fake.clone(), &file).unwrap();
        tracker.ensure("/berth").unwrap();
        fake.create("/berth/sandbox1").unwrap();
        assert!(tracker.remove_unused_parents().unwrap().is_empty());
        assert_eq!(tracker.created(), vec!["/berth"]);

        // A process directly in the parent also keeps it.
        fake.remove("/berth/sandbox1").unwrap();
        fake.put_process("/berth", 7);
        assert!(tracker.remove_unused_parents().unwrap().is_empty());
        fake.exit_process(7);
        assert_eq!(tracker.remove_unused_parents().unwrap(), vec!["/berth"]);
        assert!(!fake.exists("/berth"));
    }

    #[test]
    fn never_removes_parents_it_did_not_create() {
        let (fake, _dir, file) = setup(&["/kubepods/pod1"]);
        let tracker = ParentTracker::open(fake.clone(), &file).unwrap();
        tracker.ensure("/kubepods/pod1").unwrap();
        assert!(tracker.remove_unused_parents().unwrap().is_empty());
        assert!(fake.exists("/kubepods/pod1"));
        assert!(fake.calls().iter().all(|c| !c.starts_with("remove")));
    }

    #[test]
    fn records_survive_reopening_and_vanished_parents_are_forgotten() {
        let (fake, _dir, file) = setup(&[]);
        {
            let tracker = ParentTracker::open(fake.clone(), &file).unwrap();
            tracker.ensure("/berth").unwrap();
            tracker.ensure("/other").unwrap();
        }
        let text = fs::read_to_string(&file).unwrap();
        assert!(text.contains("\"/berth\""), "{text}");

        fake.remove("/other").unwrap();
        let tracker = ParentTracker::open(fake.clone(), &file).unwrap();
        assert_eq!(tracker.created(), vec!["/berth"]);
        let text = fs::read_to_string(&file).unwrap();
        assert!(!text.contains("/other"), "{text}");
        assert_eq!(tracker.remove_unused_parents().unwrap(), vec!["/berth"]);
        assert_eq!(
            ParentTracker::open(fake, &file).unwrap().created(),
            Vec::<String>::new()
        );
    }

    #[test]
    fn bad_state_files_are_errors() {
        let (fake, dir, _) = setup(&[]);
        let file = dir.path().join("bad.json");
        fs::write(&file, "not json").unwrap();
        let err = ParentTracker::open(fake.clone(), &file).unwrap_err();
        assert!(matches!(err, CgroupError::State { .. }), "{err}");

        fs::write(&file, r#"{"version":1,"created":["/berth/../etc"]}"#).unwrap();
        let err = ParentTracker::open(fake, &file).unwrap_err();
        assert!(matches!(err, CgroupError::InvalidPath { .. }), "{err}");
    }

    #[test]
    fn deepest_first_orders_by_depth_then_path() {
        let set: BTreeSet<String> = ["/a", "/b/c", "/a/b/c", "/a/b"]
            .into_iter()
            .map(String::from)
            .collect();
        assert_eq!(deepest_first(&set), vec!["/a/b/c", "/a/b", "/b/c", "/a"]);
    }
}
