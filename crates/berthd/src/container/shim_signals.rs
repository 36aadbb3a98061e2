//! One inotify fd over the shim dirs and one epoll set over the shims'
//! pidfds, shared by every [`ShimWatch`] of the state cache. Checking each
//! cached container's exit file (a `stat` with a path lookup) and polling
//! its pidfd cost two system calls a container at every read, nearly half
//! of an unfiltered ListContainers; with these a read costs one
//! `epoll_wait` with a zero timeout, however many containers are cached.
//!
//! Exact, not eventually so: a watch adds its dir to inotify and its pidfd
//! to the set before the shim is asked, and looks for an exit file once
//! after that, so an exit file appearing later queues an event and a shim
//! ending later makes its pidfd ready; every read drains both before it
//! answers. Whatever cannot be told for sure (a queue overflow, a failed
//! wait) counts as moved, which only costs a call to the shim.

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use berth_shim_api::files::EXIT_FILE;
use nix::errno::Errno;
use nix::poll::PollTimeout;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};

use super::state_cache::ShimWatch;

/// The epoll token of the inotify fd; pidfds get the ones after it.
const INOTIFY_TOKEN: u64 = 0;

/// The shared fds, cheap to clone.
#[derive(Clone)]
pub struct ShimSignals {
    inner: Arc<Signals>,
}

struct Signals {
    epoll: Epoll,
    inotify: Inotify,
    table: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    next_token: u64,
    /// Each live watch's "its shim ended", by the token of its pidfd.
    shims: HashMap<u64, Arc<AtomicBool>>,
    /// Each watched dir's "its exit file appeared", shared by the watches
    /// of that dir (inotify gives one descriptor per inode).
    dirs: HashMap<WatchDescriptor, Dir>,
}

struct Dir {
    watches: usize,
    exited: Arc<AtomicBool>,
}

impl ShimSignals {
    /// The fds. An error if the kernel gives no inotify or epoll fd; the
    /// caller then checks each container on its own.
    pub fn new() -> std::io::Result<Self> {
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?;
        let inotify = Inotify::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK)?;
        epoll.add(
            inotify.as_fd(),
            EpollEvent::new(EpollFlags::EPOLLIN, INOTIFY_TOKEN),
        )?;
        Ok(Self {
            inner: Arc::new(Signals {
                epoll,
                inotify,
                table: Mutex::new(Table {
                    next_token: INOTIFY_TOKEN + 1,
                    ..Table::default()
                }),
            }),
        })
    }

    /// A watch on the shim of `dir`, whose process `pidfd` is. The pidfd
    /// back if the dir cannot be watched or the pidfd not added (inotify's
    /// watch limit, say): the caller then checks that container on its own.
    pub fn watch(&self, dir: &Path, pidfd: OwnedFd) -> Result<SignalWatch, OwnedFd> {
        let signals = &self.inner;
        let mut table = signals.lock();
        let flags = AddWatchFlags::IN_CREATE
            | AddWatchFlags::IN_MOVED_TO
            | AddWatchFlags::IN_ONLYDIR
            | AddWatchFlags::IN_DELETE_SELF
            | AddWatchFlags::IN_MOVE_SELF;
        let Ok(wd) = signals.inotify.add_watch(dir, flags) else {
            return Err(pidfd);
        };
        let token = table.next_token;
        // One-shot: an ended shim is reported once, not at every drain
        // until its entry goes.
        let event = EpollEvent::new(EpollFlags::EPOLLIN | EpollFlags::EPOLLONESHOT, token);
        if signals.epoll.add(pidfd.as_fd(), event).is_err() {
            if !table.dirs.contains_key(&wd) {
                let _ = signals.inotify.rm_watch(wd);
            }
            return Err(pidfd);
        }
        table.next_token += 1;
        let shim_ended = Arc::new(AtomicBool::new(false));
        table.shims.insert(token, shim_ended.clone());
        let dir_entry = table.dirs.entry(wd).or_insert_with(|| Dir {
            watches: 0,
            exited: Arc::new(AtomicBool::new(false)),
        });
        dir_entry.watches += 1;
        let exited = dir_entry.exited.clone();
        drop(table);
        // An exit file from before the inotify watch queued no event. Out
        // of the lock: a drain sets the same shared flag.
        if dir.join(EXIT_FILE).exists() {
            exited.store(true, Ordering::SeqCst);
        }
        Ok(SignalWatch {
            signals: signals.clone(),
            token,
            wd,
            _pidfd: pidfd,
            shim_ended,
            exited,
        })
    }
}

impl Signals {
    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes in every exit file and shim end the kernel has queued.
    fn drain(&self) {
        let mut table = self.lock();
        let mut events = [EpollEvent::empty(); 64];
        loop {
            let ready = match self.epoll.wait(&mut events, PollTimeout::ZERO) {
                Ok(ready) => ready,
                Err(Errno::EINTR) => continue,
                Err(_) => {
                    table.all_moved();
                    return;
                }
            };
            for event in &events[..ready] {
                if event.data() == INOTIFY_TOKEN {
                    self.read_inotify(&mut table);
                } else if let Some(ended) = table.shims.get(&event.data()) {
                    ended.store(true, Ordering::SeqCst);
                }
            }
            if ready < events.len() {
                return;
            }
        }
    }

    fn read_inotify(&self, table: &mut Table) {
        loop {
            let events = match self.inotify.read_events() {
                Ok(events) => events,
                Err(Errno::EINTR) => continue,
                Err(Errno::EAGAIN) => return,
                Err(_) => {
                    table.all_moved();
                    return;
                }
            };
            for event in events {
                if event.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                    table.all_moved();
                    continue;
                }
                // The dir itself went or moved: nothing it says holds.
                let dir_gone = event.mask.intersects(
                    AddWatchFlags::IN_IGNORED
                        | AddWatchFlags::IN_DELETE_SELF
                        | AddWatchFlags::IN_MOVE_SELF,
                );
                let is_exit = event.name.as_deref().is_some_and(|name| name == EXIT_FILE);
                if dir_gone || is_exit {
                    if let Some(dir) = table.dirs.get(&event.wd) {
                        dir.exited.store(true, Ordering::SeqCst);
                    }
                }
            }
        }
    }
}

impl Table {
    fn all_moved(&self) {
        for flag in self.shims.values() {
            flag.store(true, Ordering::SeqCst);
        }
        for dir in self.dirs.values() {
            dir.exited.store(true, Ordering::SeqCst);
        }
    }
}

/// One container's watch: moved once its exit file appeared or its shim
/// ended.
pub struct SignalWatch {
    signals: Arc<Signals>,
    token: u64,
    wd: WatchDescriptor,
    /// Kept open so its process stays the one in the set; closing it takes
    /// it out of the set.
    _pidfd: OwnedFd,
    shim_ended: Arc<AtomicBool>,
    exited: Arc<AtomicBool>,
}

impl ShimWatch for SignalWatch {
    fn moved(&self) -> bool {
        self.signals.drain();
        self.exited.load(Ordering::SeqCst) || self.shim_ended.load(Ordering::SeqCst)
    }
}

impl Drop for SignalWatch {
    fn drop(&mut self) {
        let mut table = self.signals.lock();
        table.shims.remove(&self.token);
        let last = table.dirs.get_mut(&self.wd).is_some_and(|dir| {
            dir.watches -= 1;
            dir.watches == 0
        });
        if last {
            table.dirs.remove(&self.wd);
            // Fails only for a dir already gone, whose watch went with it.
            let _ = self.signals.inotify.rm_watch(self.wd);
        }
    }
}

/// A `sleep` standing in for a shim in the tests.
#[cfg(test)]
pub(super) struct Sleeper(crate::test_child::TestChild);

#[cfg(test)]
impl Sleeper {
    pub(super) fn start() -> Self {
        Self(crate::test_child::TestChild::spawn(
            std::process::Command::new("sleep").arg("600"),
        ))
    }

    pub(super) fn pid(&self) -> u32 {
        self.0.id()
    }

    pub(super) fn pidfd(&self) -> OwnedFd {
        crate::pidfd::open(self.0.id() as i32).unwrap()
    }

    /// Ends it and waits until it has, without reaping it: a zombie, as a
    /// shim is until its parent reaps it.
    pub(super) fn end_unreaped(&mut self) {
        self.0.kill().unwrap();
        let stat = format!("/proc/{}/stat", self.0.id());
        for _ in 0..5000 {
            let text = std::fs::read_to_string(&stat).unwrap();
            if text
                .rsplit(')')
                .next()
                .is_some_and(|rest| rest.trim_start().starts_with('Z'))
            {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        panic!("{} did not end", self.0.id());
    }

    /// Ends and reaps it.
    pub(super) fn end(&mut self) {
        self.0.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watch_moves_when_its_exit_file_is_renamed_into_place() {
        let signals = ShimSignals::new().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let shim = Sleeper::start();
        let watch = signals.watch(dir.path(), shim.pidfd()).ok().unwrap();
        assert!(!watch.moved());
        // Other files in the dir say nothing.
        std::fs::write(dir.path().join("exit.tmp"), b"{}").unwrap();
        assert!(!watch.moved());
        std::fs::rename(dir.path().join("exit.tmp"), dir.path().join("exit")).unwrap();
        assert!(watch.moved());
    }

    #[test]
    fn a_watch_moves_when_its_shim_ends_and_only_that_watch() {
        let signals = ShimSignals::new().unwrap();
        let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let mut first = Sleeper::start();
        let first_watch = signals.watch(one.path(), first.pidfd()).ok().unwrap();
        let mut second = Sleeper::start();
        let second_watch = signals.watch(two.path(), second.pidfd()).ok().unwrap();
        // Ended but not waited for yet: a zombie already counts.
        first.end_unreaped();
        // The other watch drains the first one's end and stays still.
        assert!(!second_watch.moved());
        assert!(first_watch.moved());
        assert!(first_watch.moved(), "reported once, kept for good");
        first.end();
        std::fs::write(one.path().join("exit"), b"{}").unwrap();
        assert!(!second_watch.moved());
        second.end();
        assert!(second_watch.moved());
    }

    #[test]
    fn an_exit_file_from_before_the_watch_counts() {
        let signals = ShimSignals::new().unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("exit"), b"{}").unwrap();
        let shim = Sleeper::start();
        let watch = signals.watch(dir.path(), shim.pidfd()).ok().unwrap();
        assert!(watch.moved());
    }

    #[test]
    fn watches_of_one_dir_share_its_inotify_watch_until_the_last_goes() {
        let signals = ShimSignals::new().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let shim = Sleeper::start();
        let first = signals.watch(dir.path(), shim.pidfd()).ok().unwrap();
        let second = signals.watch(dir.path(), shim.pidfd()).ok().unwrap();
        drop(first);
        // The dir is still watched for the second one.
        std::fs::write(dir.path().join("exit"), b"{}").unwrap();
        assert!(second.moved());
        drop(second);
        assert!(signals.inner.lock().dirs.is_empty());
        assert!(signals.inner.lock().shims.is_empty());
    }

    #[test]
    fn a_removed_dir_counts_as_moved() {
        let signals = ShimSignals::new().unwrap();
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("shim");
        std::fs::create_dir(&dir).unwrap();
        let shim = Sleeper::start();
        let watch = signals.watch(&dir, shim.pidfd()).ok().unwrap();
        std::fs::remove_dir(&dir).unwrap();
        assert!(watch.moved());
    }

    #[test]
    fn no_watch_without_a_dir() {
        let signals = ShimSignals::new().unwrap();
        let shim = Sleeper::start();
        assert!(signals
            .watch(Path::new("/nonexistent/berth-shim-dir"), shim.pidfd())
            .is_err());
        assert!(signals.inner.lock().dirs.is_empty());
    }
}
