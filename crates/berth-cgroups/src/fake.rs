//! An in-memory [`CgroupManager`] for unit tests of logic built on cgroups.
//!
//! It keeps one tree of cgroup paths (as if every hierarchy agreed) with the
//! processes in each, follows the real manager's rules (creation makes
//! ancestors, removal refuses while processes remain, `remove_if_empty` keeps
//! cgroups with children), and records every mutating call.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard};

use crate::manager::{relative, relative_non_root, CgroupError, CgroupManager};

/// An in-memory cgroup tree. Paths are stored normalized (`/a/b`).
#[derive(Debug, Default)]
pub struct FakeManager {
    state: Mutex<FakeState>,
}

#[derive(Debug, Default)]
struct FakeState {
    /// Existing cgroups (never the root, which always exists).
    cgroups: BTreeSet<String>,
    /// Processes per cgroup.
    procs: BTreeMap<String, BTreeSet<i32>>,
    /// Mutating calls, e.g. `"create /a"`, in order.
    calls: Vec<String>,
    /// Operations that fail from now on (`"create"`, `"add_process"`, ...).
    failing: BTreeSet<&'static str>,
}

impl FakeManager {
    /// An empty tree.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes every later call of `op` (`"ensure_parent"`, `"create"`,
    /// `"add_process"`, `"remove"`, `"update"`, `"restrict_devices"`) fail, so callers' undo paths
    /// can be tested.
    pub fn fail(&self, op: &'static str) {
        self.lock().failing.insert(op);
    }

    /// Makes every operation pass again.
    pub fn heal(&self) {
        self.lock().failing.clear();
    }

    fn injected(&self, op: &'static str, path: &str) -> Result<(), CgroupError> {
        if self.lock().failing.contains(op) {
            return Err(CgroupError::Io {
                op,
                file: std::path::Path::new("/fake").join(path.trim_start_matches('/')),
                source: std::io::Error::other("injected failure"),
            });
        }
        Ok(())
    }

    /// A tree in which `paths` (and their ancestors) already exist, as if
    /// someone else (kubelet) had created them.
    pub fn with_existing(paths: &[&str]) -> Self {
        let fake = Self::new();
        {
            let mut state = fake.lock();
            for path in paths {
                if let Ok(rel) = relative(path) {
                    insert_with_ancestors(&mut state.cgroups, &rel);
                }
            }
        }
        fake
    }

    /// Puts `pid` in `path` without going through [`CgroupManager::add_process`]
    /// (a process someone else started there).
    pub fn put_process(&self, path: &str, pid: i32) {
        if let Ok(rel) = relative(path) {
            self.lock()
                .procs
                .entry(normalized(&rel))
                .or_default()
                .insert(pid);
        }
    }

    /// Takes `pid` out of every cgroup, as if it had exited.
    pub fn exit_process(&self, pid: i32) {
        for set in self.lock().procs.values_mut() {
            set.remove(&pid);
        }
    }

    /// The existing cgroups, sorted.
    pub fn cgroups(&self) -> Vec<String> {
        self.lock().cgroups.iter().cloned().collect()
    }

    /// The mutating calls made so far, e.g. `"remove_if_empty /berth -> true"`.
    pub fn calls(&self) -> Vec<String> {
        self.lock().calls.clone()
    }

    fn lock(&self) -> MutexGuard<'_, FakeState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// `/` + a normalized relative path.
fn normalized(rel: &str) -> String {
    format!("/{rel}")
}

fn insert_with_ancestors(cgroups: &mut BTreeSet<String>, rel: &str) {
    let mut path = String::new();
    for component in rel.split('/').filter(|c| !c.is_empty()) {
        path.push('/');
        path.push_str(component);
        cgroups.insert(path.clone());
    }
}

fn is_in_subtree(candidate: &str, root: &str) -> bool {
    candidate == root
        || candidate
            .strip_prefix(root)
            .is_some_and(|rest| rest.starts_with('/'))
}

impl FakeState {
    fn pids_in(&self, path: &str, subtree: bool) -> Vec<i32> {
        let mut out = BTreeSet::new();
        for (cgroup, pids) in &self.procs {
            let hit = if subtree {
                is_in_subtree(cgroup, path)
            } else {
                cgroup == path
            };
            if hit {
                out.extend(pids.iter().copied());
            }
        }
        out.into_iter().collect()
    }
}

impl CgroupManager for FakeManager {
    fn layout(&self) -> crate::Layout {
        crate::Layout::Unified
    }

    /// One made-up hierarchy, `/fake`: nothing is read from it.
    fn hierarchy_dirs(&self, path: &str) -> Result<Vec<std::path::PathBuf>, CgroupError> {
        let rel = relative(path)?;
        Ok(vec![std::path::Path::new("/fake").join(rel)])
    }

    fn stats_dirs(&self, path: &str) -> Result<crate::stats::StatsDirs, CgroupError> {
        let rel = relative(path)?;
        Ok(crate::stats::StatsDirs::V2 {
            dir: std::path::Path::new("/fake").join(rel),
        })
    }

    fn restrict_devices(
        &self,
        path: &str,
        _policy: &crate::devices::DevicePolicy,
    ) -> Result<(), CgroupError> {
        self.injected("restrict_devices", path)?;
        self.lock().calls.push(format!("restrict_devices {path}"));
        Ok(())
    }

    fn update(&self, path: &str, _update: &crate::ResourceUpdate) -> Result<(), CgroupError> {
        self.injected("update", path)?;
        let rel = relative(path)?;
        let path = normalized(&rel);
        let mut state = self.lock();
        if !state.cgroups.contains(&path) {
            return Err(CgroupError::NotFound {
                dir: std::path::Path::new("/fake").join(&rel),
                path,
            });
        }
        state.calls.push(format!("update {path}"));
        Ok(())
    }

    fn ensure_parent(&self, parent: &str) -> Result<bool, CgroupError> {
        self.injected("ensure_parent", parent)?;
        let rel = relative(parent)?;
        if rel.is_empty() {
            return Ok(false);
        }
        let path = normalized(&rel);
        let mut state = self.lock();
        let created = !state.cgroups.contains(&path);
        insert_with_ancestors(&mut state.cgroups, &rel);
        state
            .calls
            .push(format!("ensure_parent {path} -> {created}"));
        Ok(created)
    }

    fn create(&self, path: &str) -> Result<(), CgroupError> {
        self.injected("create", path)?;
        let rel = relative_non_root(path)?;
        let mut state = self.lock();
        insert_with_ancestors(&mut state.cgroups, &rel);
        state.calls.push(format!("create {}", normalized(&rel)));
        Ok(())
    }

    fn add_process(&self, path: &str, pid: i32) -> Result<(), CgroupError> {
        self.injected("add_process", path)?;
        if pid <= 0 {
            return Err(CgroupError::InvalidPid(pid));
        }
        let rel = relative_non_root(path)?;
        let path = normalized(&rel);
        let mut state = self.lock();
        if !state.cgroups.contains(&path) {
            return Err(CgroupError::NotFound {
                dir: path.clone().into(),
                path,
            });
        }
        for set in state.procs.values_mut() {
            set.remove(&pid);
        }
        state.procs.entry(path.clone()).or_default().insert(pid);
        state.calls.push(format!("add_process {path} {pid}"));
        Ok(())
    }

    fn remove(&self, path: &str) -> Result<(), CgroupError> {
        self.injected("remove", path)?;
        let rel = relative_non_root(path)?;
        let path = normalized(&rel);
        let mut state = self.lock();
        let pids = state.pids_in(&path, true);
        if !pids.is_empty() {
            return Err(CgroupError::Busy { path, pids });
        }
        state.cgroups.retain(|c| !is_in_subtree(c, &path));
        state.procs.retain(|c, _| !is_in_subtree(c, &path));
        state.calls.push(format!("remove {path}"));
        Ok(())
    }

    fn kill(&self, path: &str) -> Result<(), CgroupError> {
        self.injected("kill", path)?;
        let rel = relative_non_root(path)?;
        let path = normalized(&rel);
        let mut state = self.lock();
        for (cgroup, pids) in state.procs.iter_mut() {
            if is_in_subtree(cgroup, &path) {
                pids.clear();
            }
        }
        state.calls.push(format!("kill {path}"));
        Ok(())
    }

    fn remove_if_empty(&self, path: &str) -> Result<bool, CgroupError> {
        let rel = relative(path)?;
        if rel.is_empty() {
            return Ok(false);
        }
        let path = normalized(&rel);
        let mut state = self.lock();
        let has_children = state
            .cgroups
            .iter()
            .any(|c| c != &path && is_in_subtree(c, &path));
        let removed = state.cgroups.contains(&path)
            && !has_children
            && state.pids_in(&path, false).is_empty();
        if removed {
            state.cgroups.remove(&path);
            state.procs.remove(&path);
        }
        state
            .calls
            .push(format!("remove_if_empty {path} -> {removed}"));
        Ok(removed)
    }

    fn exists(&self, path: &str) -> bool {
        match relative(path) {
            Ok(rel) if rel.is_empty() => true,
            Ok(rel) => self.lock().cgroups.contains(&normalized(&rel)),
            Err(_) => false,
        }
    }

    fn pids(&self, path: &str) -> Result<Vec<i32>, CgroupError> {
        let rel = relative(path)?;
        Ok(self.lock().pids_in(&normalized(&rel), false))
    }

    fn subtree_pids(&self, path: &str) -> Result<Vec<i32>, CgroupError> {
        let rel = relative(path)?;
        Ok(self.lock().pids_in(&normalized(&rel), true))
    }

    fn has_children(&self, path: &str) -> Result<bool, CgroupError> {
        let rel = relative(path)?;
        let path = normalized(&rel);
        Ok(self
            .lock()
            .cgroups
            .iter()
            .any(|c| c != &path && is_in_subtree(c, &path)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_the_real_managers_rules() {
        let fake = FakeManager::with_existing(&["/kubepods/pod1"]);
        assert!(fake.exists("/kubepods"));
        assert!(!fake.ensure_parent("/kubepods/pod1").unwrap());
        assert!(fake.ensure_parent("/berth").unwrap());
        assert!(!fake.ensure_parent("/berth").unwrap());

        fake.create("/berth/c1").unwrap();
        fake.add_process("/berth/c1", 42).unwrap();
        assert_eq!(fake.pids("/berth/c1").unwrap(), vec![42]);
        assert_eq!(fake.pids("/berth").unwrap(), Vec::<i32>::new());
        assert_eq!(fake.subtree_pids("/berth").unwrap(), vec![42]);
        assert!(matches!(
            fake.add_process("/berth/none", 1),
            Err(CgroupError::NotFound { .. })
        ));

        assert!(!fake.remove_if_empty("/berth").unwrap());
        assert!(matches!(
            fake.remove("/berth/c1"),
            Err(CgroupError::Busy { pids, .. }) if pids == vec![42]
        ));
        fake.exit_process(42);
        fake.remove("/berth/c1").unwrap();
        fake.remove("/berth/c1").unwrap();
        assert!(fake.remove_if_empty("/berth").unwrap());
        assert!(!fake.exists("/berth"));
        assert!(fake.remove("/").is_err());
        // "/berthx" is not inside "/berth".
        assert!(!is_in_subtree("/berthx", "/berth"));
    }
}
