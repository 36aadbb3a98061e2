//! A few threads that write a layer's small regular files while the tar
//! stream goes on being read: creating a file costs far more than reading
//! it from the stream, and layers of many small files (source trees,
//! language runtimes) spend most of their unpack there.
//!
//! The reader hands over only files whose slot is empty and whose path no
//! queued file shares, and drains the queue before any other entry, so
//! the result is what unpacking in order gives.

use std::collections::HashSet;
use std::ffi::OsString;
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::Scope;

use super::UnpackError;

/// Threads writing files: the cores a 2-core node has.
const THREADS: usize = 2;
/// Files queued at once; with [`MAX_QUEUED_FILE`] this bounds the memory
/// a layer's unpack holds.
const QUEUE: usize = 64;
/// Files larger than this are written by the reader itself: queueing
/// them would hold their data in memory.
pub(super) const MAX_QUEUED_FILE: u64 = 256 << 10;

/// Writing one file: everything it needs is owned.
pub(super) type Job = Box<dyn FnOnce() -> Result<(), UnpackError> + Send>;

/// The queue to the writer threads and what they have not reported yet.
pub(super) struct Writers {
    jobs: Option<SyncSender<Job>>,
    results: Receiver<Result<(), UnpackError>>,
    outstanding: usize,
    /// Paths (as components) of the queued files.
    queued: HashSet<Vec<OsString>>,
}

impl Writers {
    /// Starts the threads in `scope`; they end when the [`Writers`] is
    /// dropped and the queue is empty.
    pub(super) fn start<'scope>(scope: &'scope Scope<'scope, '_>) -> Self {
        let (jobs, queue) = mpsc::sync_channel::<Job>(QUEUE);
        let (report, results) = mpsc::channel();
        let queue = Arc::new(Mutex::new(queue));
        for _ in 0..THREADS {
            let queue = queue.clone();
            let report = report.clone();
            scope.spawn(move || loop {
                let job = match queue.lock() {
                    Ok(queue) => queue.recv(),
                    Err(_) => return,
                };
                let Ok(job) = job else {
                    return;
                };
                if report.send(job()).is_err() {
                    return;
                }
            });
        }
        Self {
            jobs: Some(jobs),
            results,
            outstanding: 0,
            queued: HashSet::new(),
        }
    }

    /// Whether `components` or one of its ancestors is a queued file:
    /// then an entry there must wait for the queue.
    pub(super) fn touches_queued(&self, components: &[OsString]) -> bool {
        !self.queued.is_empty()
            && (1..=components.len()).any(|len| self.queued.contains(&components[..len]))
    }

    /// Queues writing the file at `components`.
    pub(super) fn submit(
        &mut self,
        components: Vec<OsString>,
        job: Job,
    ) -> Result<(), UnpackError> {
        let Some(jobs) = &self.jobs else {
            return job();
        };
        match jobs.send(job) {
            Ok(()) => {
                self.outstanding += 1;
                self.queued.insert(components);
                Ok(())
            }
            // The threads are gone: write it here.
            Err(mpsc::SendError(job)) => {
                self.jobs = None;
                job()
            }
        }
    }

    /// Waits until every queued file is written; the first failure is the
    /// error.
    pub(super) fn drain(&mut self) -> Result<(), UnpackError> {
        let mut first_error = None;
        while self.outstanding > 0 {
            let Ok(result) = self.results.recv() else {
                break;
            };
            self.outstanding -= 1;
            if let (Err(err), None) = (result, &first_error) {
                first_error = Some(err);
            }
        }
        self.queued.clear();
        first_error.map_or(Ok(()), Err)
    }
}
