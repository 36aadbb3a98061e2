//! The container states berthd reports, kept between calls. Asking every
//! shim over its socket made an unfiltered ListContainers cost about 0.1 ms
//! per container (55 ms with 500), and kubelet relists every second;
//! containerd and CRI-O answer from memory too.
//!
//! An entry is the last state a shim answered. An exited state is final. A
//! created or running one holds until a sign that it may have moved, checked
//! at every read through the [`ShimWatch`] taken before the shim was asked:
//! the shim's exit file appeared, or its process ended. The one move with no
//! such sign, created to running, is berthd's own StartContainer, which
//! calls [`StateCache::forget`]. A read that raced a forget of its own
//! container is not stored; forgets of other containers do not touch it,
//! or a node starting a hundred pods at once would keep none of their
//! states and ask every shim at every relist while they start.
//!
//! A real watch holds a pidfd, so the cache keeps at most a set number of
//! watched entries (half the fd limit berthd was given); past that, the
//! states of other live containers are asked of their shims as before.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use berth_shim_api::protocol::{RunState, StateInfo};

/// What tells whether a container may have left the state its shim gave
/// after this watch was taken.
pub trait ShimWatch: Send + Sync {
    /// Whether its exit file exists or its shim ended.
    fn moved(&self) -> bool;
}

/// The cache, by shim dir.
pub struct StateCache {
    inner: Mutex<Inner>,
    /// How many entries with a watch it may hold.
    max_watches: usize,
}

/// How many forgets [`Inner::forgotten`] remembers before it starts over.
const MAX_FORGOTTEN: usize = 4096;

#[derive(Default)]
struct Inner {
    /// Entries that hold a watch.
    watches: usize,
    /// Bumped by every forget.
    epoch: u64,
    /// The epoch of each dir's last forget: a store of that dir that began
    /// before it is dropped.
    forgotten: HashMap<PathBuf, u64>,
    /// The epoch `forgotten` last started over at: a store that began
    /// before it is dropped, whatever its dir.
    floor: u64,
    entries: HashMap<PathBuf, Entry>,
}

struct Entry {
    state: StateInfo,
    /// None for an exited state, which never moves.
    watch: Option<Box<dyn ShimWatch>>,
}

impl StateCache {
    /// An empty cache that holds at most `max_watches` watches.
    pub fn new(max_watches: usize) -> Self {
        Self {
            inner: Mutex::default(),
            max_watches,
        }
    }

    /// A cache sized for this process: half its soft limit on open fds.
    pub fn for_fd_limit() -> Self {
        let soft = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
            .map_or(1024, |(soft, _)| soft);
        Self::new(usize::try_from(soft / 2).unwrap_or(usize::MAX))
    }

    /// The state kept for `dir`, if it still holds.
    pub fn get(&self, dir: &Path) -> Option<StateInfo> {
        let mut inner = self.lock();
        let entry = inner.entries.get(dir)?;
        if entry.watch.as_ref().is_some_and(|watch| watch.moved()) {
            inner.remove(dir);
            return None;
        }
        Some(entry.state.clone())
    }

    /// Taken before a shim is asked, handed back to [`Self::store`].
    pub fn epoch(&self) -> u64 {
        self.lock().epoch
    }

    /// Keeps what the shim of `dir` answered, unless a forget of `dir` came
    /// since `epoch`. A created or running state is kept only with a watch
    /// that can tell when it moves.
    pub fn store(
        &self,
        dir: &Path,
        epoch: u64,
        state: &StateInfo,
        watch: Option<Box<dyn ShimWatch>>,
    ) {
        let watch = match (state.status, watch) {
            (RunState::Stopped, _) => None,
            (_, Some(watch)) => Some(watch),
            (_, None) => return,
        };
        let mut inner = self.lock();
        if epoch < inner.floor || inner.forgotten.get(dir).is_some_and(|&at| at > epoch) {
            return;
        }
        inner.remove(dir);
        if watch.is_some() {
            if inner.watches >= self.max_watches {
                return;
            }
            inner.watches += 1;
        }
        inner.entries.insert(
            dir.to_path_buf(),
            Entry {
                state: state.clone(),
                watch,
            },
        );
    }

    /// Drops what is kept for `dir`: berthd moved the container, or
    /// removed it.
    pub fn forget(&self, dir: &Path) {
        let mut inner = self.lock();
        inner.epoch += 1;
        let epoch = inner.epoch;
        // Bounded: starting over drops the stores in flight, which only
        // costs their next reads a call to the shim.
        if inner.forgotten.len() >= MAX_FORGOTTEN && !inner.forgotten.contains_key(dir) {
            inner.forgotten.clear();
            inner.floor = epoch;
        }
        inner.forgotten.insert(dir.to_path_buf(), epoch);
        inner.remove(dir);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Inner {
    fn remove(&mut self, dir: &Path) {
        if let Some(entry) = self.entries.remove(dir) {
            if entry.watch.is_some() {
                self.watches -= 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    struct Flag(Arc<AtomicBool>);

    impl ShimWatch for Flag {
        fn moved(&self) -> bool {
            self.0.load(Ordering::SeqCst)
        }
    }

    fn state(status: RunState) -> StateInfo {
        StateInfo {
            status,
            ..crate::fakes::created_state("c1", 42)
        }
    }

    fn flag() -> (Arc<AtomicBool>, Option<Box<dyn ShimWatch>>) {
        let moved = Arc::new(AtomicBool::new(false));
        (moved.clone(), Some(Box::new(Flag(moved))))
    }

    #[test]
    fn a_running_state_holds_until_its_watch_says_it_moved() {
        let cache = StateCache::new(8);
        let dir = Path::new("/s/c1");
        let (moved, watch) = flag();
        cache.store(dir, cache.epoch(), &state(RunState::Running), watch);
        assert_eq!(cache.get(dir).map(|s| s.status), Some(RunState::Running));
        moved.store(true, Ordering::SeqCst);
        assert!(cache.get(dir).is_none());
        // Gone for good, even if the watch would say otherwise now.
        moved.store(false, Ordering::SeqCst);
        assert!(cache.get(dir).is_none());
    }

    #[test]
    fn an_exited_state_is_final() {
        let cache = StateCache::new(8);
        let dir = Path::new("/s/c1");
        let (moved, watch) = flag();
        cache.store(dir, cache.epoch(), &state(RunState::Stopped), watch);
        moved.store(true, Ordering::SeqCst);
        assert_eq!(cache.get(dir).map(|s| s.status), Some(RunState::Stopped));
        // Without a watch too.
        let other = Path::new("/s/c2");
        cache.store(other, cache.epoch(), &state(RunState::Stopped), None);
        assert!(cache.get(other).is_some());
    }

    #[test]
    fn a_live_state_without_a_watch_is_not_kept() {
        let cache = StateCache::new(8);
        let dir = Path::new("/s/c1");
        cache.store(dir, cache.epoch(), &state(RunState::Created), None);
        assert!(cache.get(dir).is_none());
    }

    #[test]
    fn it_holds_no_more_watches_than_it_may() {
        let cache = StateCache::new(2);
        let dirs: Vec<PathBuf> = (0..4).map(|n| PathBuf::from(format!("/s/c{n}"))).collect();
        for dir in &dirs {
            let (_, watch) = flag();
            cache.store(dir, cache.epoch(), &state(RunState::Running), watch);
        }
        let kept = |cache: &StateCache| dirs.iter().filter(|d| cache.get(d).is_some()).count();
        assert_eq!(kept(&cache), 2);
        // Storing again over a kept entry does not count it twice, and an
        // exited state needs no watch.
        let (_, watch) = flag();
        cache.store(&dirs[0], cache.epoch(), &state(RunState::Running), watch);
        cache.store(&dirs[3], cache.epoch(), &state(RunState::Stopped), None);
        assert_eq!(kept(&cache), 3);
        // A freed watch makes room.
        cache.forget(&dirs[1]);
        let (_, watch) = flag();
        cache.store(&dirs[2], cache.epoch(), &state(RunState::Running), watch);
        assert!(cache.get(&dirs[2]).is_some());
    }

    #[test]
    fn a_read_that_raced_a_forget_is_not_kept() {
        let cache = StateCache::new(8);
        let dir = Path::new("/s/c1");
        let epoch = cache.epoch();
        // StartContainer lands while the shim's "created" answer is on its
        // way back.
        cache.forget(dir);
        let (_, watch) = flag();
        cache.store(dir, epoch, &state(RunState::Created), watch);
        assert!(cache.get(dir).is_none());
        let (_, watch) = flag();
        cache.store(dir, cache.epoch(), &state(RunState::Running), watch);
        assert_eq!(cache.get(dir).map(|s| s.status), Some(RunState::Running));
        cache.forget(dir);
        assert!(cache.get(dir).is_none());
    }

    #[test]
    fn a_forget_of_another_container_does_not_drop_a_read() {
        let cache = StateCache::new(8);
        let (one, two) = (Path::new("/s/c1"), Path::new("/s/c2"));
        let epoch = cache.epoch();
        // c2 starts while c1's answer is on its way back.
        cache.forget(two);
        let (_, watch) = flag();
        cache.store(one, epoch, &state(RunState::Running), watch);
        assert_eq!(cache.get(one).map(|s| s.status), Some(RunState::Running));
        // c2's own read from before its forget is still dropped.
        let (_, watch) = flag();
        cache.store(two, epoch, &state(RunState::Created), watch);
        assert!(cache.get(two).is_none());
    }

    #[test]
    fn starting_over_drops_every_read_in_flight() {
        let cache = StateCache::new(8);
        let dirs: Vec<PathBuf> = (0..=MAX_FORGOTTEN)
            .map(|n| PathBuf::from(format!("/s/c{n}")))
            .collect();
        let before = cache.epoch();
        for dir in &dirs[..MAX_FORGOTTEN] {
            cache.forget(dir);
        }
        let during = cache.epoch();
        // The one forget past the bound starts the record over.
        cache.forget(&dirs[MAX_FORGOTTEN]);
        let unrelated = Path::new("/s/other");
        let (_, watch) = flag();
        cache.store(unrelated, before, &state(RunState::Running), watch);
        assert!(
            cache.get(unrelated).is_none(),
            "began before the start-over"
        );
        let (_, watch) = flag();
        cache.store(&dirs[0], during, &state(RunState::Running), watch);
        assert!(
            cache.get(&dirs[0]).is_none(),
            "its forget's record was dropped"
        );
        let (_, watch) = flag();
        cache.store(unrelated, cache.epoch(), &state(RunState::Running), watch);
        assert!(cache.get(unrelated).is_some());
        assert!(cache.lock().forgotten.len() <= MAX_FORGOTTEN);
    }
}
