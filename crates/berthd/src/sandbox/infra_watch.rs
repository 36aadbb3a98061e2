//! Whether a pod's infra process still runs, from a pidfd kept per process:
//! ListPodSandbox asks it of every pod each time kubelet relists (every
//! second), and reading /proc/<pid>/stat for each cost about 12 µs a pod
//! (1.3 ms a list at 110 pods). A pidfd is checked with one poll.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::{LazyLock, Mutex, MutexGuard};

use super::store::InfraProcess;

/// berthd's watches, sized for its fd limit.
pub static WATCHES: LazyLock<InfraWatches> = LazyLock::new(InfraWatches::for_fd_limit);

/// The fewest kept watches at which a prune runs.
const FIRST_PRUNE: usize = 64;

/// A pidfd per infra process seen alive, at most a set number of them.
pub struct InfraWatches {
    inner: Mutex<Inner>,
    max: usize,
}

struct Inner {
    fds: HashMap<InfraProcess, OwnedFd>,
    /// How many kept watches start a prune of the exited ones: a removed
    /// pod's infra was killed, but nothing asks of it again.
    prune_at: usize,
}

impl InfraWatches {
    /// Keeps at most `max` pidfds.
    pub fn new(max: usize) -> Self {
        Self {
            inner: Mutex::new(Inner {
                fds: HashMap::new(),
                prune_at: FIRST_PRUNE,
            }),
            max,
        }
    }

    /// Sized for this process: an eighth of its soft limit on open fds
    /// (the shims' state cache takes half).
    pub fn for_fd_limit() -> Self {
        let soft = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
            .map_or(1024, |(soft, _)| soft);
        Self::new(usize::try_from(soft / 8).unwrap_or(usize::MAX))
    }

    /// Whether `process` still runs: from its kept pidfd, else by `read`
    /// (the process's pid and start time), keeping a pidfd of a live one.
    pub fn is_alive(&self, process: &InfraProcess, read: impl Fn(&InfraProcess) -> bool) -> bool {
        {
            let mut inner = self.lock();
            if let Some(fd) = inner.fds.get(process) {
                if !crate::pidfd::exited(fd) {
                    return true;
                }
                inner.fds.remove(process);
                return false;
            }
        }
        // Opened before the read: if the pid then is still the recorded
        // process, so was it when the pidfd was opened (the process started
        // before either, and two live processes never share a pid).
        let fd = crate::pidfd::open(process.pid);
        if !read(process) {
            return false;
        }
        if let Some(fd) = fd {
            self.lock().keep(process, fd, self.max);
        }
        true
    }

    /// How many pidfds are kept.
    #[cfg(test)]
    fn kept(&self) -> usize {
        self.lock().fds.len()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Inner {
    fn keep(&mut self, process: &InfraProcess, fd: OwnedFd, max: usize) {
        if self.fds.len() >= self.prune_at {
            self.fds.retain(|_, fd| !crate::pidfd::exited(fd));
            // Doubling: each prune pays for as many watches kept since.
            self.prune_at = (2 * self.fds.len()).max(FIRST_PRUNE);
        }
        if self.fds.len() < max {
            self.fds.insert(process.clone(), fd);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::process::Command;

    use super::*;
    use crate::sandbox::process::{identify, start_time};
    use crate::test_child::TestChild;

    /// Killed on drop: a failing assertion leaves no sleep behind.
    fn sleeper() -> (TestChild, InfraProcess) {
        let child = TestChild::spawn(Command::new("sleep").arg("100"));
        let process = identify(child.id() as i32).unwrap();
        (child, process)
    }

    fn by_stat(process: &InfraProcess) -> bool {
        start_time(process.pid) == Some(process.start_time)
    }

    #[test]
    fn a_live_process_is_read_once_then_watched_until_it_exits() {
        let watches = InfraWatches::new(10);
        let (mut child, process) = sleeper();
        let reads = Cell::new(0);
        let counted = |p: &InfraProcess| {
            reads.set(reads.get() + 1);
            by_stat(p)
        };
        assert!(watches.is_alive(&process, counted));
        assert!(watches.is_alive(&process, counted));
        assert_eq!((reads.get(), watches.kept()), (1, 1));
        child.end();
        assert!(!watches.is_alive(&process, counted));
        assert_eq!(
            (reads.get(), watches.kept()),
            (1, 0),
            "its watch told, and went"
        );
    }

    #[test]
    fn a_reused_pid_is_not_the_recorded_process() {
        let watches = InfraWatches::new(10);
        let (_child, process) = sleeper();
        assert!(watches.is_alive(&process, by_stat));
        let other = InfraProcess {
            start_time: process.start_time + 1,
            ..process.clone()
        };
        assert!(!watches.is_alive(&other, by_stat));
        assert_eq!(watches.kept(), 1, "only the live one kept");
    }

    #[test]
    fn a_dead_process_is_never_kept_and_the_limit_holds() {
        let watches = InfraWatches::new(1);
        let (mut first, one) = sleeper();
        let (mut second, two) = sleeper();
        assert!(!watches.is_alive(&one, |_| false));
        assert_eq!(watches.kept(), 0);
        assert!(watches.is_alive(&one, by_stat));
        assert!(watches.is_alive(&two, by_stat));
        assert_eq!(watches.kept(), 1, "at most one kept");
        for child in [&mut first, &mut second] {
            child.end();
        }
        assert!(!watches.is_alive(&two, by_stat));
    }

    #[test]
    fn exited_processes_nobody_asks_of_again_are_pruned() {
        let watches = InfraWatches::new(1000);
        let mut children = Vec::new();
        for _ in 0..FIRST_PRUNE {
            let (child, process) = sleeper();
            assert!(watches.is_alive(&process, by_stat));
            children.push(child);
        }
        assert_eq!(watches.kept(), FIRST_PRUNE);
        for child in &mut children {
            child.end();
        }
        let (_last, process) = sleeper();
        assert!(watches.is_alive(&process, by_stat));
        assert_eq!(watches.kept(), 1, "the exited ones went at the prune");
    }
}
