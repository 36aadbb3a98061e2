//! The stats sampler: every container's and pod's usage, read in the
//! background once per `stats_collection_period` (CRI-O's key), which the
//! stats and metrics calls answer from. Read live on every call, kubelet's
//! ListPodSandboxStats took 0.3-0.8 ms per pod (every cgroup file, a walk
//! of each writable layer, a thread in each pod's network namespace); from
//! the last sample it is only the building of the answer.
//!
//! Each value keeps the time it was read, and a sample's cpu rate
//! (`usage_nano_cores`) is the one between it and the sample before, as
//! cadvisor computes it between its housekeeping reads (the first pass
//! of a container: since a call read it, if one did). A pass replaces
//! the whole set, so removed containers and pods drop out; ones created
//! since are not in it, and the calls read those when asked
//! ([`StatsSampler::container`] answers None), as they do a sample gone
//! stale (a pass that could not run). The sampler reads through
//! [`UsageSource`], which reads cgroups, the filesystem and `/proc`, never a
//! shim: a stopped shim cannot stall it.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use berth_cgroups::stats::CgroupStats;
use futures_util::stream::{self, StreamExt};

use crate::cgroup_reading::Reading;
use crate::clock::now_nanos;
use crate::container::store::ContainerRecord;
use crate::container::ContainerManager;
use crate::cpu_rate::{CpuSample, CpuSamples};
use crate::sandbox::store::SandboxRecord;
use crate::usage_reading::{ContainerReading, PodReading};

/// How many containers or pods a pass reads at once: each reading is a few
/// blocking reads on a thread of their own; a few at once keep the pass
/// short without filling the blocking pool.
const READS_AT_ONCE: usize = 4;

/// One container's last sample.
#[derive(Debug, Clone)]
pub struct ContainerSample {
    pub reading: ContainerReading,
    /// The cpu rate since the sample before, in billionths of a core.
    pub nano_cores: Option<u64>,
}

/// One pod's last sample.
#[derive(Debug, Clone)]
pub struct PodSample {
    pub reading: PodReading,
    pub nano_cores: Option<u64>,
}

/// What a pass reads, and how.
#[async_trait]
pub trait UsageSource: Send + Sync {
    /// The containers there are now.
    fn containers(&self) -> Vec<Arc<ContainerRecord>>;
    /// The pods there are now.
    fn pods(&self) -> Vec<Arc<SandboxRecord>>;
    /// One container's readings, open files included.
    async fn container(&self, record: &ContainerRecord) -> ContainerReading;
    /// One pod's readings; `containers` are its containers' cgroups.
    async fn pod(&self, record: &SandboxRecord, containers: Vec<CgroupStats>) -> PodReading;
}

/// The node's containers and pods, read as [`crate::usage_reading`] does.
pub struct HostUsage {
    pub containers: Arc<ContainerManager>,
}

#[async_trait]
impl UsageSource for HostUsage {
    fn containers(&self) -> Vec<Arc<ContainerRecord>> {
        // As last persisted: a pass never waits for a stop or a removal.
        self.containers.store.published_all()
    }

    fn pods(&self) -> Vec<Arc<SandboxRecord>> {
        self.containers.sandboxes.store.published_all()
    }

    async fn container(&self, record: &ContainerRecord) -> ContainerReading {
        crate::usage_reading::container(&self.containers, record, true).await
    }

    async fn pod(&self, record: &SandboxRecord, containers: Vec<CgroupStats>) -> PodReading {
        crate::usage_reading::pod(&self.containers, record, containers).await
    }
}

#[derive(Default)]
struct Samples {
    /// Counts the passes: 0 before the first.
    pass: u64,
    /// When the pass started (nanoseconds since the epoch): every reading
    /// in it is from then or later.
    started_at: i64,
    containers: HashMap<String, Arc<ContainerSample>>,
    pods: HashMap<String, Arc<PodSample>>,
}

/// The last pass's samples.
pub struct StatsSampler {
    /// None: no sampling, every call reads.
    period: Option<Duration>,
    samples: RwLock<Samples>,
    /// The last cpu reading of each container and pod, a pass's or a
    /// call's: a container's first pass has its rate from a call that read
    /// it before, and after that the passes follow each other.
    cpu: CpuSamples,
    /// The number of the pass that ended last, for work that follows a
    /// pass ([`Self::passes`]).
    ended: tokio::sync::watch::Sender<u64>,
}

impl StatsSampler {
    /// A sampler that samples every `period`; zero samples nothing.
    pub fn new(period: Duration) -> Self {
        Self {
            period: (!period.is_zero()).then_some(period),
            samples: RwLock::default(),
            cpu: CpuSamples::default(),
            ended: tokio::sync::watch::Sender::new(0),
        }
    }

    /// Changes to the number of each pass as it ends.
    pub fn passes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.ended.subscribe()
    }

    /// The cpu rate of `id` from `reading` and its reading before; keeps
    /// `reading` for the next.
    pub fn rate(&self, id: &str, reading: &Reading) -> Option<u64> {
        let cpu = reading.stats.as_ref()?.cpu?;
        self.cpu.rate(
            id,
            CpuSample {
                at_ns: reading.at,
                usage_ns: cpu.usage_ns,
            },
        )
    }

    /// Forgets the cpu reading of a removed container or pod.
    pub fn forget(&self, id: &str) {
        self.cpu.forget(id);
    }

    /// Samples every period, for as long as berthd runs (none when
    /// sampling is off, or when its thread cannot start: the calls then
    /// read live). A pass that overruns the period delays the next instead
    /// of running two at once.
    ///
    /// The passes run on a thread of their own at a lower cpu priority
    /// ([`SAMPLER_NICE`]), with the threads they start for blocking reads:
    /// a pass at 250 pods keeps both cores of a small node busy for a few
    /// hundred milliseconds, and a kubelet call that came meanwhile waited
    /// for it. Lowered, a pass takes what the calls leave.
    pub fn spawn(
        self: &Arc<Self>,
        source: Arc<dyn UsageSource>,
    ) -> Option<std::thread::JoinHandle<()>> {
        let period = self.period?;
        let sampler = self.clone();
        let started = std::thread::Builder::new()
            .name("stats-sampler".into())
            .spawn(move || {
                lower_priority();
                // Its own runtime: spawn_blocking starts the blocking
                // threads from this one, and they inherit its priority.
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .thread_name("stats-sampler")
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(err) => {
                        tracing::error!(error = %err, "stats sampler: no runtime; stats are read at each call");
                        return;
                    }
                };
                runtime.block_on(async move {
                    let mut ticks = tokio::time::interval(period);
                    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    loop {
                        ticks.tick().await;
                        sampler.sample(source.as_ref()).await;
                    }
                });
            });
        match started {
            Ok(handle) => Some(handle),
            Err(err) => {
                tracing::error!(error = %err, "stats sampler: no thread; stats are read at each call");
                None
            }
        }
    }

    /// One pass: every container, then every pod (which sums its
    /// containers' cgroups as this pass read them).
    pub async fn sample(&self, source: &dyn UsageSource) {
        let started_at = now_nanos();
        let clock = std::time::Instant::now();
        let records = source.containers();
        let readings: Vec<(Arc<ContainerRecord>, ContainerReading)> = stream::iter(records)
            .map(|record| async move {
                let reading = source.container(&record).await;
                (record, reading)
            })
            .buffer_unordered(READS_AT_ONCE)
            .collect()
            .await;
        let mut of_pod: HashMap<String, Vec<CgroupStats>> = HashMap::new();
        for (record, reading) in &readings {
            if let Some(stats) = &reading.cgroup.stats {
                of_pod
                    .entry(record.sandbox_id.clone())
                    .or_default()
                    .push(stats.clone());
            }
        }
        let of_pod = &of_pod;
        let pods: Vec<(Arc<SandboxRecord>, PodReading)> = stream::iter(source.pods())
            .map(|record| async move {
                let containers = of_pod.get(&record.id).cloned().unwrap_or_default();
                let reading = source.pod(&record, containers).await;
                (record, reading)
            })
            .buffer_unordered(READS_AT_ONCE)
            .collect()
            .await;

        let containers: HashMap<String, Arc<ContainerSample>> = readings
            .into_iter()
            .map(|(record, reading)| {
                let nano_cores = self.rate(&record.id, &reading.cgroup);
                let sample = ContainerSample {
                    reading,
                    nano_cores,
                };
                (record.id.clone(), Arc::new(sample))
            })
            .collect();
        let pods: HashMap<String, Arc<PodSample>> = pods
            .into_iter()
            .map(|(record, reading)| {
                let nano_cores = self.rate(&record.id, &reading.cgroup);
                (
                    record.id.clone(),
                    Arc::new(PodSample {
                        reading,
                        nano_cores,
                    }),
                )
            })
            .collect();
        let (container_count, pod_count) = (containers.len(), pods.len());
        let pass = {
            let mut samples = self
                .samples
                .write()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let pass = samples.pass.wrapping_add(1);
            *samples = Samples {
                pass,
                started_at,
                containers,
                pods,
            };
            pass
        };
        // When a pass ran and how long it took: a slow call's time can be
        // set against the passes (`berthd::stats_sampler=debug`).
        tracing::debug!(
            pass,
            containers = container_count,
            pods = pod_count,
            took_ms = clock.elapsed().as_secs_f64() * 1e3,
            "stats sampler pass"
        );
        self.ended.send_replace(pass);
    }

    /// The number of the last pass, if it is fresh at `now` and has a
    /// sample of each of `pods` and `containers`: every answer built from
    /// those ids then comes from that pass alone, so it may be kept until
    /// the next (see `server::metrics_cache`).
    pub fn pass_covering<'a>(
        &self,
        pods: impl IntoIterator<Item = &'a str>,
        containers: impl IntoIterator<Item = &'a str>,
        now: i64,
    ) -> Option<u64> {
        let samples = self.read();
        let covered = samples.pass > 0
            && self.fresh(samples.started_at, now)
            && pods.into_iter().all(|id| samples.pods.contains_key(id))
            && containers
                .into_iter()
                .all(|id| samples.containers.contains_key(id));
        covered.then_some(samples.pass)
    }

    /// Container `id`'s last sample, unless it has none or it is older
    /// than two periods at `now` (nanoseconds): then the caller reads.
    pub fn container(&self, id: &str, now: i64) -> Option<Arc<ContainerSample>> {
        let sample = self.read().containers.get(id)?.clone();
        self.fresh(sample.reading.cgroup.at, now).then_some(sample)
    }

    /// Pod `id`'s last sample, as [`Self::container`].
    pub fn pod(&self, id: &str, now: i64) -> Option<Arc<PodSample>> {
        let sample = self.read().pods.get(id)?.clone();
        self.fresh(sample.reading.cgroup.at, now).then_some(sample)
    }

    /// Whether a sample read at `at` may still answer at `now`: two
    /// periods leave room for a pass that a loaded node slowed down.
    fn fresh(&self, at: i64, now: i64) -> bool {
        let Some(period) = self.period else {
            return false;
        };
        let limit = i64::try_from(period.as_nanos().saturating_mul(2)).unwrap_or(i64::MAX);
        now.saturating_sub(at) <= limit
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Samples> {
        self.samples
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The nice value of the sampler's thread and of the threads it starts
/// (Linux keeps a nice value per thread, and a new thread takes its
/// creator's): at 10 the kernel gives it about a tenth of a core that a
/// call at 0 wants.
const SAMPLER_NICE: i32 = 10;

/// Lowers the calling thread's cpu priority to [`SAMPLER_NICE`] (never
/// raises it: a berthd started at a lower priority keeps it); a pass at the
/// normal priority is slower for the calls, not wrong, so a failure is
/// only logged.
fn lower_priority() {
    let result = thread_nice().and_then(|nice| {
        if nice >= SAMPLER_NICE {
            return Ok(());
        }
        let tid = this_thread_id()?;
        // SAFETY: setpriority takes plain integers and changes only the
        // scheduling of thread `tid`, this one.
        let set = unsafe { nix::libc::setpriority(nix::libc::PRIO_PROCESS, tid, SAMPLER_NICE) };
        nix::errno::Errno::result(set).map(drop)
    });
    if let Err(err) = result {
        tracing::warn!(error = %err, "stats sampler: cannot lower its cpu priority");
    }
}

/// The calling thread's nice value.
fn thread_nice() -> nix::Result<i32> {
    let tid = this_thread_id()?;
    // getpriority may return -1 as a value: only errno tells an error.
    nix::errno::Errno::clear();
    // SAFETY: getpriority takes plain integers and reads thread `tid`'s
    // nice value.
    let nice = unsafe { nix::libc::getpriority(nix::libc::PRIO_PROCESS, tid) };
    match nix::errno::Errno::last() {
        nix::errno::Errno::UnknownErrno => Ok(nice),
        err if nice == -1 => Err(err),
        _ => Ok(nice),
    }
}

/// The calling thread's id, as setpriority and getpriority take it.
fn this_thread_id() -> nix::Result<u32> {
    u32::try_from(nix::unistd::gettid().as_raw()).map_err(|_| nix::errno::Errno::EINVAL)
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use berth_cgroups::stats::CpuStats;

    use super::*;
    use crate::container::lifecycle_tests::{container, fixture, Fixture};

    /// The fixture's containers and pods, with the cpu time each has used
    /// as the test sets it, read at the time the test sets.
    struct Script {
        host: HostUsage,
        now: Mutex<i64>,
        used: Mutex<HashMap<String, u64>>,
    }

    impl Script {
        fn on(f: &Fixture) -> Self {
            Self {
                host: HostUsage {
                    containers: f.manager.clone(),
                },
                now: Mutex::new(0),
                used: Mutex::default(),
            }
        }

        fn at(&self, now: i64, used: &[(&str, u64)]) {
            *self.now.lock().unwrap() = now;
            let mut kept = self.used.lock().unwrap();
            for (id, ns) in used {
                kept.insert(id.to_string(), *ns);
            }
        }

        fn reading(&self, id: &str) -> Reading {
            let usage_ns = self.used.lock().unwrap().get(id).copied();
            Reading {
                at: *self.now.lock().unwrap(),
                stats: usage_ns.map(|usage_ns| CgroupStats {
                    cpu: Some(CpuStats { usage_ns }),
                    ..Default::default()
                }),
            }
        }
    }

    #[async_trait]
    impl UsageSource for Script {
        fn containers(&self) -> Vec<Arc<ContainerRecord>> {
            self.host.containers()
        }

        fn pods(&self) -> Vec<Arc<SandboxRecord>> {
            self.host.pods()
        }

        async fn container(&self, record: &ContainerRecord) -> ContainerReading {
            let cgroup = self.reading(&record.id);
            ContainerReading {
                layer_at: cgroup.at,
                cgroup,
                processes: None,
                layer: None,
            }
        }

        async fn pod(&self, record: &SandboxRecord, containers: Vec<CgroupStats>) -> PodReading {
            // The pod's own cgroup plus what the pass read of its containers.
            let mut cgroup = self.reading(&record.id);
            if let Some(stats) = cgroup.stats.as_mut() {
                for container in &containers {
                    stats.accumulate(container);
                }
            }
            PodReading {
                cgroup,
                network: None,
            }
        }
    }

    /// A [`Script`] that records the nice value of each thread a pass
    /// reads a container on: the pass's own, and a blocking thread it
    /// starts.
    struct Priorities {
        script: Script,
        seen: Mutex<Vec<i32>>,
    }

    #[async_trait]
    impl UsageSource for Priorities {
        fn containers(&self) -> Vec<Arc<ContainerRecord>> {
            self.script.containers()
        }

        fn pods(&self) -> Vec<Arc<SandboxRecord>> {
            self.script.pods()
        }

        async fn container(&self, record: &ContainerRecord) -> ContainerReading {
            let own = thread_nice().unwrap();
            let blocking = tokio::task::spawn_blocking(|| thread_nice().unwrap())
                .await
                .unwrap();
            self.seen.lock().unwrap().extend([own, blocking]);
            self.script.container(record).await
        }

        async fn pod(&self, record: &SandboxRecord, containers: Vec<CgroupStats>) -> PodReading {
            self.script.pod(record, containers).await
        }
    }

    #[tokio::test]
    async fn passes_run_at_a_lower_cpu_priority_than_the_calls() {
        let f = fixture().await;
        let pod = f.pod("web", "").await;
        f.create_ok(&pod, container("app")).await;
        let source = Arc::new(Priorities {
            script: Script::on(&f),
            seen: Mutex::default(),
        });
        let calls = thread_nice().unwrap();
        // The first pass starts at once; the next would be an hour later.
        let sampler = Arc::new(StatsSampler::new(Duration::from_secs(3600)));
        assert!(sampler.spawn(source.clone()).is_some(), "a sampler thread");
        for _ in 0..1000 {
            if source.seen.lock().unwrap().len() >= 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let seen = source.seen.lock().unwrap().clone();
        assert_eq!(
            seen.len(),
            2,
            "one container read in the first pass: {seen:?}"
        );
        for nice in seen {
            assert!(
                nice >= SAMPLER_NICE.max(calls),
                "a pass read at nice {nice}, the calls run at {calls}"
            );
        }
        assert_eq!(
            thread_nice().unwrap(),
            calls,
            "the calls' thread is untouched"
        );
    }

    #[tokio::test]
    async fn a_pass_covers_the_ids_it_sampled_while_it_is_fresh() {
        let f = fixture().await;
        let pod = f.pod("web", "").await;
        let app = f.create_ok(&pod, container("app")).await;
        let script = Script::on(&f);
        let sampler = StatsSampler::new(Duration::from_secs(10));
        let now = now_nanos();
        assert_eq!(
            sampler.pass_covering([pod.as_str()], [app.as_str()], now),
            None,
            "no pass yet"
        );
        script.at(now, &[(&app, 0)]);
        sampler.sample(&script).await;
        assert_eq!(
            sampler.pass_covering([pod.as_str()], [app.as_str()], now_nanos()),
            Some(1)
        );
        assert_eq!(sampler.pass_covering([], [], now_nanos()), Some(1));
        let newer = f.create_ok(&pod, container("newer")).await;
        assert_eq!(
            sampler.pass_covering([pod.as_str()], [app.as_str(), newer.as_str()], now_nanos()),
            None,
            "a container the pass did not read"
        );
        assert_eq!(
            sampler.pass_covering(["other"], [], now_nanos()),
            None,
            "a pod the pass did not read"
        );
        let stale = now_nanos() + 21 * SECOND;
        assert_eq!(
            sampler.pass_covering([pod.as_str()], [app.as_str()], stale),
            None,
            "two periods after the pass started"
        );
        sampler.sample(&script).await;
        assert_eq!(
            sampler.pass_covering([pod.as_str()], [app.as_str(), newer.as_str()], now_nanos()),
            Some(2),
            "the next pass read it"
        );
        let off = StatsSampler::new(Duration::ZERO);
        off.sample(&script).await;
        assert_eq!(off.pass_covering([], [], now_nanos()), None, "sampling off");
    }

    const SECOND: i64 = 1_000_000_000;
    /// A second of cpu time, in nanoseconds.
    const CPU_SECOND: u64 = 1_000_000_000;

    #[tokio::test]
    async fn calls_answer_from_the_last_pass_with_its_time_and_the_rate_between_two() {
        let f = fixture().await;
        let pod = f.pod("web", "").await;
        let app = f.create_ok(&pod, container("app")).await;
        let script = Script::on(&f);
        let sampler = StatsSampler::new(Duration::from_secs(10));

        script.at(10 * SECOND, &[(&app, 5 * CPU_SECOND), (&pod, CPU_SECOND)]);
        sampler.sample(&script).await;
        let first = sampler.container(&app, 11 * SECOND).expect("sampled");
        assert_eq!(
            first.reading.cgroup.at,
            10 * SECOND,
            "the sample's own time"
        );
        assert_eq!(first.nano_cores, None, "one sample has no rate");

        // 20 s later, half a core used by the container and a quarter by
        // the pod's own cgroup.
        script.at(
            30 * SECOND,
            &[(&app, 15 * CPU_SECOND), (&pod, 6 * CPU_SECOND)],
        );
        sampler.sample(&script).await;
        let second = sampler.container(&app, 31 * SECOND).expect("sampled");
        assert_eq!(second.reading.cgroup.at, 30 * SECOND);
        assert_eq!(second.nano_cores, Some(500_000_000));
        let pod_sample = sampler.pod(&pod, 31 * SECOND).expect("sampled");
        assert_eq!(
            pod_sample.nano_cores,
            Some(750_000_000),
            "its own and its container's"
        );
    }

    #[tokio::test]
    async fn new_ones_are_left_to_the_caller_removed_ones_drop_out_and_stale_ones_expire() {
        let f = fixture().await;
        let pod = f.pod("web", "").await;
        let old = f.create_ok(&pod, container("old")).await;
        let script = Script::on(&f);
        let sampler = StatsSampler::new(Duration::from_secs(10));
        script.at(10 * SECOND, &[(&old, 0)]);
        sampler.sample(&script).await;

        let new = f.create_ok(&pod, container("new")).await;
        assert!(
            sampler.container(&new, 11 * SECOND).is_none(),
            "read when asked"
        );
        f.manager.remove(&old).await.expect("remove");
        script.at(20 * SECOND, &[(&new, 0)]);
        sampler.sample(&script).await;
        assert!(sampler.container(&new, 21 * SECOND).is_some());
        assert!(sampler.container(&old, 21 * SECOND).is_none(), "removed");

        // A pass that did not run for two periods: the caller reads.
        assert!(sampler.container(&new, 40 * SECOND).is_some());
        assert!(sampler.container(&new, 40 * SECOND + 1).is_none());
        assert!(sampler.pod(&pod, 40 * SECOND + 1).is_none());
    }

    #[tokio::test]
    async fn a_period_of_zero_samples_nothing() {
        let f = fixture().await;
        let pod = f.pod("web", "").await;
        let app = f.create_ok(&pod, container("app")).await;
        let sampler = Arc::new(StatsSampler::new(Duration::ZERO));
        let script = Arc::new(Script::on(&f));
        assert!(sampler.spawn(script.clone()).is_none());
        sampler.sample(script.as_ref()).await;
        assert!(sampler.container(&app, 0).is_none(), "every call reads");
    }

    #[tokio::test]
    async fn a_pass_asks_no_shim() {
        let f = fixture().await;
        let pod = f.pod("web", "").await;
        let app = f.create_ok(&pod, container("app")).await;
        f.manager.start(&app).await.expect("start");
        // Every shim stopped: a pass that asked one would never end.
        for record in f.manager.store.published_all() {
            f.fake_shims.stall(&record.shim_dir);
        }
        let sampler = StatsSampler::new(Duration::from_secs(10));
        let host = HostUsage {
            containers: f.manager.clone(),
        };
        tokio::time::timeout(Duration::from_secs(60), sampler.sample(&host))
            .await
            .expect("the pass ends");
        let now = crate::clock::now_nanos();
        assert!(sampler.container(&app, now).is_some());
        assert!(sampler.pod(&pod, now).is_some());
    }
}
