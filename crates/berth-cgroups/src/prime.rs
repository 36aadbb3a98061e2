//! Starting early the wait that a move between cgroups makes.
//!
//! A move of a process into a cgroup (a write to `cgroup.procs`) takes the
//! kernel's cgroup threadgroup rwsem, one for all hierarchies, for writing,
//! and that writer waits for an RCU grace period unless another writer held
//! it within the last one: on the development machine a move after a quiet
//! spell takes 7.8 ms, one right after another 0.03 ms. A container's first
//! process is moved in the middle of its creation (by libcontainer's
//! intermediate process, a few ms into CreateContainer).
//! [`MigrationPrimer::prime`], called as a creation begins, writes
//! berthd's own pid into the cgroup it is already in: a move that changes
//! nothing, but starts that grace period while the rest of the work runs,
//! so the move that matters waits for what is left of it at most.
//! (Hosts that mount cgroups with `favordynmods` have no such wait; the
//! move is then merely useless.)

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::Layout;

/// Moves berthd into its own cgroup, to start the grace period the next
/// move waits for. Cheap to call often: a call while one is in flight does
/// nothing (that one's grace period serves both).
#[derive(Debug)]
pub struct MigrationPrimer {
    /// berthd's own cgroup's `cgroup.procs`; `None` where none was found.
    procs: Option<PathBuf>,
    in_flight: AtomicBool,
}

impl MigrationPrimer {
    /// For this process, from `/proc/self/cgroup`, under `root` (the cgroup
    /// mount point, `/sys/fs/cgroup`).
    pub fn for_this_process(root: &Path, layout: Layout) -> Self {
        let procs = std::fs::read_to_string("/proc/self/cgroup")
            .ok()
            .and_then(|text| own_procs_file(&text, root, layout))
            .filter(|path| path.exists());
        tracing::debug!(?procs, "cgroup migration primer");
        Self {
            procs,
            in_flight: AtomicBool::new(false),
        }
    }

    /// The `cgroup.procs` file it writes to, if any.
    pub fn procs_file(&self) -> Option<&Path> {
        self.procs.as_deref()
    }

    /// Moves berthd into the cgroup it is in. Blocks for up to a grace
    /// period: call it on a thread of its own. Best effort: a failure only
    /// loses the head start, so it is not reported.
    pub fn prime(&self) {
        let Some(procs) = &self.procs else {
            return;
        };
        if self.in_flight.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Err(err) = std::fs::write(procs, std::process::id().to_string()) {
            tracing::debug!(path = %procs.display(), error = %err, "priming a cgroup move");
        }
        self.in_flight.store(false, Ordering::Release);
    }
}

/// The `cgroup.procs` file of the cgroup a `/proc/self/cgroup` text puts
/// the process in, in the hierarchy a move is cheapest to name: the unified
/// one on v2 and hybrid hosts (no controller there to act on a move), else
/// the `pids` hierarchy, else the first v1 hierarchy listed.
pub fn own_procs_file(self_cgroup: &str, root: &Path, layout: Layout) -> Option<PathBuf> {
    let entries: Vec<(&str, &str)> = self_cgroup
        .lines()
        .filter_map(|line| {
            let mut fields = line.splitn(3, ':');
            let _id = fields.next()?;
            let controllers = fields.next()?;
            let path = fields.next()?;
            path.starts_with('/').then_some((controllers, path))
        })
        .collect();
    let unified = || {
        entries
            .iter()
            .find(|(controllers, _)| controllers.is_empty())
            .map(|(_, path)| *path)
    };
    let (dir, path) = match layout {
        Layout::Unified => (root.to_path_buf(), unified()?),
        Layout::Hybrid => (root.join("unified"), unified()?),
        Layout::Legacy => {
            let is_pids = |controllers: &str| controllers.split(',').any(|c| c == "pids");
            let (controllers, path) = entries
                .iter()
                .find(|(controllers, _)| is_pids(controllers))
                .or_else(|| {
                    entries
                        .iter()
                        .find(|(controllers, _)| !controllers.is_empty())
                })?;
            let mount = controllers.trim_start_matches("name=");
            (root.join(mount), *path)
        }
    };
    Some(dir.join(path.trim_start_matches('/')).join("cgroup.procs"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "9:name=systemd:/\n8:pids:/\n4:memory:/other/x\n1:cpu:/\n0::/\n";

    #[test]
    fn hybrid_and_unified_hosts_use_the_unified_hierarchy() {
        let root = Path::new("/sys/fs/cgroup");
        assert_eq!(
            own_procs_file(HYBRID, root, Layout::Hybrid),
            Some(PathBuf::from("/sys/fs/cgroup/unified/cgroup.procs"))
        );
        assert_eq!(
            own_procs_file("0::/system.slice/berth.service\n", root, Layout::Unified),
            Some(PathBuf::from(
                "/sys/fs/cgroup/system.slice/berth.service/cgroup.procs"
            ))
        );
    }

    #[test]
    fn legacy_hosts_use_pids_else_the_first_controller() {
        let root = Path::new("/sys/fs/cgroup");
        assert_eq!(
            own_procs_file(HYBRID, root, Layout::Legacy),
            Some(PathBuf::from("/sys/fs/cgroup/pids/cgroup.procs"))
        );
        assert_eq!(
            own_procs_file(
                "3:cpu,cpuacct:/a/b\n2:name=systemd:/a\n",
                root,
                Layout::Legacy
            ),
            Some(PathBuf::from("/sys/fs/cgroup/cpu,cpuacct/a/b/cgroup.procs"))
        );
    }

    #[test]
    fn nothing_usable_gives_none() {
        let root = Path::new("/sys/fs/cgroup");
        assert_eq!(own_procs_file("", root, Layout::Unified), None);
        assert_eq!(own_procs_file("1:cpu:/\n", root, Layout::Hybrid), None);
        assert_eq!(own_procs_file("garbage\n", root, Layout::Legacy), None);
    }

    /// On the host (as root, on any cgroup layout): the primer finds this
    /// process's cgroup, and priming leaves it where it was.
    #[test]
    fn priming_on_the_host_moves_nothing() {
        if !nix::unistd::Uid::effective().is_root() {
            eprintln!("skipped: needs root");
            return;
        }
        let before = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let primer =
            MigrationPrimer::for_this_process(Path::new("/sys/fs/cgroup"), Layout::detect());
        let procs = primer
            .procs_file()
            .expect("this process's cgroup.procs")
            .to_path_buf();
        primer.prime();
        assert_eq!(
            std::fs::read_to_string("/proc/self/cgroup").unwrap(),
            before
        );
        let pid = std::process::id().to_string();
        let members = std::fs::read_to_string(&procs).unwrap();
        assert!(
            members.lines().any(|line| line == pid),
            "{}",
            procs.display()
        );
    }
}
