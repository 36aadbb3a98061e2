//! Signalling and removing the container's cgroup directly, in the
//! directories berthd named (`--cgroup-dir`, one per hierarchy).
//!
//! libcontainer's kill-all and delete do the same through a fresh cgroup
//! manager each time, and on cgroup v1 that manager looks up every
//! controller's mount point in `/proc/self/mountinfo`, reading the whole
//! table for each controller the host has not mounted. The table holds a
//! few mounts per pod (rootfs, /dev/shm, namespace pins), so with 500 pods
//! each StopContainer and RemoveContainer read it a dozen times: 20-25 ms
//! each, growing with the node. berthd already knows the directories.
//!
//! Only for cgroupfs paths: a systemd scope is removed by stopping its unit,
//! which libcontainer does over D-Bus.

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// How long to wait for a v1 freezer to reach FROZEN, and for a cgroup to
/// empty before rmdir gives up (its last processes are being reaped).
const SETTLE_ROUNDS: u32 = 200;
const SETTLE_POLL: Duration = Duration::from_millis(5);

/// The container's cgroup directory in each hierarchy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupDirs {
    dirs: Vec<PathBuf>,
    /// The hierarchies libcontainer does not join (see `adopt_init`).
    extras: OnceLock<Vec<Extra>>,
}

/// A hierarchy only berth puts the container in: its dir there, and the
/// hierarchy's root, where the shim stays (it has no controllers: nothing
/// is charged there). Out of berthd's cgroup, as the shim is in the
/// controllers' hierarchies: a restart of berthd's unit leaves it alone.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Extra {
    dir: PathBuf,
    home: PathBuf,
}

impl CgroupDirs {
    /// `None` when berthd named none (a systemd scope, or an older berthd).
    pub fn new(dirs: &[PathBuf]) -> Option<Self> {
        (!dirs.is_empty()).then(|| Self {
            dirs: dirs.to_vec(),
            extras: OnceLock::new(),
        })
    }

    /// Sends `signal` to every process in the cgroup, the cgroup frozen
    /// meanwhile so nothing forks past it (as runc's and libcontainer's
    /// kill-all do). A cgroup already gone has nothing to signal.
    pub fn signal_all(&self, signal: Signal) -> io::Result<()> {
        let existing: Vec<&Path> = self
            .dirs
            .iter()
            .map(PathBuf::as_path)
            .filter(|d| d.is_dir())
            .collect();
        if existing.is_empty() {
            return Ok(());
        }
        if signal == Signal::SIGKILL {
            // v2 (5.14+): the kernel kills the whole subtree, forks included.
            for dir in &existing {
                let _ = std::fs::write(dir.join("cgroup.kill"), "1");
            }
        }
        freeze(&existing, true);
        let result = (|| {
            for pid in pids(&existing)? {
                match kill(Pid::from_raw(pid), signal) {
                    Ok(()) | Err(Errno::ESRCH) => {}
                    Err(e) => return Err(io::Error::from(e)),
                }
            }
            Ok(())
        })();
        freeze(&existing, false);
        result
    }

    /// Moves the container's init into its cgroup in the hierarchies
    /// libcontainer left it out of. libcontainer's v1 manager joins only the
    /// controllers it knows, which leaves the container in the root of
    /// named hierarchies (`name=systemd`) and of the hybrid layout's unified
    /// one: a root cgroup's `release_agent` is the CVE-2022-0492 path out,
    /// closed then only by the kernel's fix. runc joins every hierarchy; so
    /// do we. Those hierarchies are remembered, with their roots, for
    /// [`CgroupDirs::with_extras`].
    pub fn adopt_init(&self, init: i32) -> io::Result<()> {
        let mut extras = Vec::new();
        for dir in &self.dirs {
            // libcontainer made the controllers' dirs, not the others'.
            std::fs::create_dir_all(dir).map_err(|e| named(e, "creating", dir))?;
            let procs = dir.join("cgroup.procs");
            let members =
                std::fs::read_to_string(&procs).map_err(|e| named(e, "reading", &procs))?;
            if members.lines().any(|line| line.trim() == init.to_string()) {
                continue;
            }
            std::fs::write(&procs, init.to_string()).map_err(|e| named(e, "joining", &procs))?;
            extras.push(dir.clone());
        }
        if extras.is_empty() {
            return Ok(());
        }
        let theirs = read_cgroups(&init.to_string())?;
        let mut found = Vec::new();
        for dir in extras {
            let home = home_of(&dir, &theirs).ok_or_else(|| {
                io::Error::other(format!(
                    "no hierarchy of /proc/{init}/cgroup holds {}",
                    dir.display()
                ))
            })?;
            found.push(Extra { dir, home });
        }
        go_home(&found, &std::process::id().to_string());
        let _ = self.extras.set(found);
        Ok(())
    }

    /// Runs `start` (which forks a process into the container) with the
    /// shim in the container's cgroup of the hierarchies [`adopt_init`]
    /// found, so the process is born there, then moves the shim back. The
    /// shim is single-threaded: nothing else forks meanwhile.
    ///
    /// [`adopt_init`]: CgroupDirs::adopt_init
    pub fn with_extras<T>(&self, start: impl FnOnce() -> T) -> io::Result<T> {
        let extras = self.extras.get().map(Vec::as_slice).unwrap_or_default();
        let own = std::process::id().to_string();
        for extra in extras {
            let procs = extra.dir.join("cgroup.procs");
            if let Err(e) = std::fs::write(&procs, &own) {
                go_home(extras, &own);
                return Err(named(e, "joining", &procs));
            }
        }
        let started = start();
        go_home(extras, &own);
        Ok(started)
    }

    /// Removes the cgroup in every hierarchy, sub-cgroups first. Processes
    /// just killed may take a moment to leave: rmdir is retried while the
    /// kernel says busy. A directory already gone is fine.
    pub fn remove(&self) -> io::Result<()> {
        for dir in &self.dirs {
            let mut deepest_first = Vec::new();
            collect_subtree(dir, &mut deepest_first)?;
            for cgroup in deepest_first.iter().rev() {
                rmdir_settled(cgroup)?;
            }
        }
        Ok(())
    }
}

/// Back to the shim's own cgroups; a failure is logged (the shim would
/// then keep the container's cgroup from being removed, which says so).
fn go_home(extras: &[Extra], own: &str) {
    for extra in extras {
        let procs = extra.home.join("cgroup.procs");
        if let Err(e) = std::fs::write(&procs, own) {
            tracing::error!(%e, path = %procs.display(), "moving the shim back to its cgroup");
        }
    }
}

fn named(e: io::Error, what: &str, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{what} {}: {e}", path.display()))
}

/// `/proc/PID/cgroup` as (hierarchy id, path) pairs.
fn read_cgroups(pid: &str) -> io::Result<Vec<(String, String)>> {
    let file = format!("/proc/{pid}/cgroup");
    let text = std::fs::read_to_string(&file).map_err(|e| named(e, "reading", Path::new(&file)))?;
    Ok(parse_cgroups(&text))
}

fn parse_cgroups(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let id = parts.next()?;
            let _controllers = parts.next()?;
            Some((id.to_string(), parts.next()?.to_string()))
        })
        .collect()
}

/// Where the shim goes back to in the hierarchy of `dir`: its root. The
/// container's path there is its path in any hierarchy the init joined (a
/// cgroupfs path is the same in all); the mount is what precedes it.
fn home_of(dir: &Path, init: &[(String, String)]) -> Option<PathBuf> {
    init.iter().find_map(|(_, path)| {
        let rel = path.trim_start_matches('/');
        if rel.is_empty() {
            return None;
        }
        let mount = dir.to_str()?.strip_suffix(rel)?;
        Some(PathBuf::from(mount))
    })
}

/// Freezes (or thaws) through one freezer for every dir: v1's where any dir
/// has `freezer.state` (as runc's v1 manager), else v2's `cgroup.freeze`.
/// In the hybrid layout the unified hierarchy has `cgroup.freeze` too, but a
/// task the v1 freezer holds never reaches the point where v2 freezes it:
/// `frozen 1` never came, and every kill-all waited out the settle (a second
/// per stop). Freezing is asynchronous in both: it waits until the kernel
/// reports the cgroup frozen (v1 FROZEN, v2 `frozen 1`).
fn freeze(dirs: &[&Path], frozen: bool) {
    let v1: Vec<PathBuf> = dirs
        .iter()
        .map(|dir| dir.join("freezer.state"))
        .filter(|state| state.exists())
        .collect();
    if !v1.is_empty() {
        for state in &v1 {
            let _ = std::fs::write(state, if frozen { "FROZEN" } else { "THAWED" });
            if frozen {
                settle(|| std::fs::read_to_string(state).is_ok_and(|s| s.trim() != "FREEZING"));
            }
        }
        return;
    }
    for dir in dirs {
        let v2 = dir.join("cgroup.freeze");
        if std::fs::write(&v2, if frozen { "1" } else { "0" }).is_ok() && frozen {
            let events = dir.join("cgroup.events");
            settle(|| {
                std::fs::read_to_string(&events)
                    .map_or(true, |s| s.lines().any(|l| l.trim() == "frozen 1"))
            });
        }
    }
}

/// Polls `done` until it holds or the rounds run out.
fn settle(mut done: impl FnMut() -> bool) {
    for _ in 0..SETTLE_ROUNDS {
        if done() {
            return;
        }
        std::thread::sleep(SETTLE_POLL);
    }
}

/// Every pid in the cgroups and their sub-cgroups.
fn pids(dirs: &[&Path]) -> io::Result<BTreeSet<i32>> {
    let mut all = BTreeSet::new();
    for dir in dirs {
        let mut cgroups = Vec::new();
        collect_subtree(dir, &mut cgroups)?;
        for cgroup in cgroups {
            match std::fs::read_to_string(cgroup.join("cgroup.procs")) {
                Ok(text) => all.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok())),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(all)
}

/// `dir` and every directory below it, parents before children; nothing
/// when `dir` does not exist.
fn collect_subtree(dir: &Path, out: &mut Vec<PathBuf>) -> io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    out.push(dir.to_path_buf());
    for entry in entries {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            collect_subtree(&entry.path(), out)?;
        }
    }
    Ok(())
}

fn rmdir_settled(dir: &Path) -> io::Result<()> {
    for _ in 0..SETTLE_ROUNDS {
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.raw_os_error() == Some(Errno::EBUSY as i32) => {
                std::thread::sleep(SETTLE_POLL)
            }
            Err(e) => return Err(io::Error::other(format!("removing {}: {e}", dir.display()))),
        }
    }
    Err(io::Error::other(format!(
        "removing {}: processes are still in it",
        dir.display()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shims_home_is_the_root_of_the_dirs_hierarchy() {
        let init = parse_cgroups("9:name=systemd:/\n4:memory:/berth/c1\n0::/\n");
        assert_eq!(
            home_of(Path::new("/sys/fs/cgroup/systemd/berth/c1"), &init),
            Some(PathBuf::from("/sys/fs/cgroup/systemd/"))
        );
        assert_eq!(
            home_of(Path::new("/sys/fs/cgroup/unified/berth/c1"), &init),
            Some(PathBuf::from("/sys/fs/cgroup/unified/"))
        );
        assert_eq!(home_of(Path::new("/elsewhere/c2"), &init), None);
    }

    #[test]
    fn no_dirs_means_libcontainer_does_it() {
        assert_eq!(CgroupDirs::new(&[]), None);
        assert!(CgroupDirs::new(&[PathBuf::from("/sys/fs/cgroup/x")]).is_some());
    }

    #[test]
    fn subtrees_list_parents_before_children() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("c");
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::create_dir_all(root.join("d")).unwrap();
        std::fs::write(root.join("cgroup.procs"), "").unwrap();
        let mut out = Vec::new();
        collect_subtree(&root, &mut out).unwrap();
        let pos = |p: &Path| out.iter().position(|x| x == p).unwrap();
        assert_eq!(out.len(), 4);
        assert_eq!(pos(&root), 0);
        assert!(pos(&root.join("a")) < pos(&root.join("a/b")));
        let mut missing = Vec::new();
        collect_subtree(&tmp.path().join("gone"), &mut missing).unwrap();
        assert!(missing.is_empty());
    }

    #[test]
    fn pids_are_read_from_every_level_once() {
        let tmp = tempfile::tempdir().unwrap();
        let one = tmp.path().join("one");
        let two = tmp.path().join("two");
        std::fs::create_dir_all(one.join("sub")).unwrap();
        std::fs::create_dir_all(&two).unwrap();
        std::fs::write(one.join("cgroup.procs"), "10\n11\n").unwrap();
        std::fs::write(one.join("sub/cgroup.procs"), "12\n").unwrap();
        std::fs::write(two.join("cgroup.procs"), "10\n").unwrap();
        let all = pids(&[one.as_path(), two.as_path()]).unwrap();
        assert_eq!(all.into_iter().collect::<Vec<_>>(), [10, 11, 12]);
    }

    #[test]
    fn the_v1_freezer_alone_freezes_where_there_is_one() {
        let tmp = tempfile::tempdir().unwrap();
        let freezer = tmp.path().join("freezer");
        let unified = tmp.path().join("unified");
        std::fs::create_dir_all(&freezer).unwrap();
        std::fs::create_dir_all(&unified).unwrap();
        std::fs::write(freezer.join("freezer.state"), "THAWED").unwrap();
        std::fs::write(unified.join("cgroup.freeze"), "0").unwrap();
        std::fs::write(unified.join("cgroup.events"), "populated 1\nfrozen 1\n").unwrap();
        let read = |path: &Path| std::fs::read_to_string(path).unwrap();

        freeze(&[unified.as_path(), freezer.as_path()], true);
        assert_eq!(read(&freezer.join("freezer.state")), "FROZEN");
        assert_eq!(read(&unified.join("cgroup.freeze")), "0", "hybrid: v1 only");
        freeze(&[unified.as_path(), freezer.as_path()], false);
        assert_eq!(read(&freezer.join("freezer.state")), "THAWED");

        freeze(&[unified.as_path()], true);
        assert_eq!(read(&unified.join("cgroup.freeze")), "1", "v2 alone");
        freeze(&[unified.as_path()], false);
        assert_eq!(read(&unified.join("cgroup.freeze")), "0");
    }

    #[test]
    fn removing_what_is_gone_succeeds() {
        let tmp = tempfile::tempdir().unwrap();
        let dirs = CgroupDirs::new(&[tmp.path().join("never-made")]).unwrap();
        dirs.remove().unwrap();
        dirs.signal_all(Signal::SIGKILL).unwrap();
    }
}
