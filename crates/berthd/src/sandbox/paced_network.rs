//! Paces CNI ADDs when many come at once and the node's CPUs are all busy.
//! kubelet starts every new pod's sandbox at once; with a hundred ADDs
//! sharing two CPUs (bridge, host-local, portmap and the iptables they
//! run), each one takes as long as all of them, and kubelet's own relist
//! and status writes wait behind them: no pod runs until nearly all have
//! their network. Run one after the other, the first pods run within a
//! second and the rest follow.
//!
//! Only for a flood: up to [`FREE_PER_SLOT`] ADDs a slot run at once
//! freely (a few at a time overlap their waits and finish together sooner
//! than one after the other would). Only while the CPUs are busy: a plugin
//! that mostly waits (an IPAM server, an agent on a socket) costs no CPU,
//! and queueing behind it would only slow a burst down, so a waiting ADD
//! goes ahead as soon as the CPUs are not all busy, and an ADD that has run
//! for [`SLOW_ADD`] gives its slot up, so a stuck plugin holds no other pod
//! back longer. DEL is not paced: a pod's teardown never waits behind new
//! pods.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use berth_network::cni::{AddResult, CniError, NetworkConfigList, PodNetwork};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::host::PodNetworks;

/// How many ADDs a slot lets run at once before new ones wait.
pub const FREE_PER_SLOT: usize = 4;

/// How long an ADD holds its slot at most: long past what a local plugin
/// chain takes on a busy node, short beside kubelet's patience.
pub const SLOW_ADD: Duration = Duration::from_secs(2);

/// How often the CPUs are looked at for an ADD waiting for a slot, by one
/// of the waiting ADDs: a hundred of them must neither read the load a
/// hundred times nor all go at once on a moment of spare CPU.
const LOOK_EVERY: Duration = Duration::from_millis(20);

/// Whether every CPU has work queued (then ADDs past the slots wait).
pub trait CpuLoad: Send + Sync {
    fn saturated(&self) -> bool;
}

/// The kernel's CPU pressure (PSI, `/proc/pressure/cpu`): busy when, since
/// the last look, some task waited for a CPU a tenth of the time or more. Unlike
/// a count of runnable tasks it also sees the moments every ADD in flight
/// waits (on exec, netlink, a lock) and a CPU idles.
pub struct CpuPressure {
    last: std::sync::Mutex<(std::time::Instant, u64)>,
}

const PRESSURE: &str = "/proc/pressure/cpu";

impl CpuPressure {
    /// None where the kernel keeps no pressure figures (PSI off).
    pub fn open() -> Option<Self> {
        let total = waited_micros(&std::fs::read_to_string(PRESSURE).ok()?)?;
        Some(Self {
            last: std::sync::Mutex::new((std::time::Instant::now(), total)),
        })
    }
}

impl CpuLoad for CpuPressure {
    fn saturated(&self) -> bool {
        let Some(total) = std::fs::read_to_string(PRESSURE)
            .ok()
            .and_then(|text| waited_micros(&text))
        else {
            return true;
        };
        let now = std::time::Instant::now();
        let mut last = self
            .last
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let (at, before) = *last;
        *last = (now, total);
        let span = now.duration_since(at).as_micros();
        span == 0 || u128::from(total.saturating_sub(before)) * 10 >= span
    }
}

/// The microseconds some task waited for a CPU, from the `some` line of
/// `/proc/pressure/cpu` ("some avg10=0.85 avg60=2.47 avg300=1.76 total=5671").
fn waited_micros(pressure: &str) -> Option<u64> {
    pressure
        .lines()
        .find(|line| line.starts_with("some "))?
        .split_whitespace()
        .find_map(|field| field.strip_prefix("total="))?
        .parse()
        .ok()
}

/// The kernel's count of runnable tasks, against the CPUs this process may
/// use: where there is no CPU pressure to read.
pub struct RunQueue {
    pub cpus: usize,
}

impl CpuLoad for RunQueue {
    fn saturated(&self) -> bool {
        match std::fs::read_to_string("/proc/loadavg") {
            Ok(text) => runnable(&text).is_some_and(|running| running > self.cpus),
            // Not knowing, pace: the slots are the default.
            Err(_) => true,
        }
    }
}

/// The runnable tasks in a `/proc/loadavg` line ("0.5 0.4 0.3 3/412 9"),
/// the reader itself counted.
fn runnable(loadavg: &str) -> Option<usize> {
    loadavg
        .split_whitespace()
        .nth(3)?
        .split_once('/')?
        .0
        .parse()
        .ok()
}

/// The pod network with ADDs paced.
pub struct PacedNetworks {
    pub inner: Arc<dyn PodNetworks>,
    /// One per ADD that may run while the CPUs are busy.
    slots: Arc<Semaphore>,
    load: Arc<dyn CpuLoad>,
    slow: Duration,
    /// When a waiting ADD last looked at the CPUs.
    last_look: std::sync::Mutex<Option<tokio::time::Instant>>,
    /// ADDs running or waiting.
    pending: Arc<AtomicUsize>,
    /// How many of them run before new ones wait.
    free: usize,
}

/// One ADD counted in [`PacedNetworks::pending`] until it ends or is
/// dropped.
struct Pending(Arc<AtomicUsize>);

impl Pending {
    fn enter(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Self(count.clone())
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl PacedNetworks {
    /// `slots` ADDs at once while more than [`FREE_PER_SLOT`] times as many
    /// are asked for and `load` says the CPUs are busy.
    pub fn new(
        inner: Arc<dyn PodNetworks>,
        slots: usize,
        load: Arc<dyn CpuLoad>,
        slow: Duration,
    ) -> Self {
        Self {
            inner,
            slots: Arc::new(Semaphore::new(slots)),
            load,
            slow,
            last_look: std::sync::Mutex::new(None),
            pending: Arc::default(),
            free: slots.saturating_mul(FREE_PER_SLOT),
        }
    }

    /// A slot, or none when few ADDs are pending or the CPUs have room
    /// for one more.
    async fn admit(&self) -> Option<OwnedSemaphorePermit> {
        if let Ok(slot) = self.slots.clone().try_acquire_owned() {
            return Some(slot);
        }
        // One place in the slots' queue for the whole wait: slots go first
        // come, first served (a new Acquire each look would queue again).
        let queued = self.slots.clone().acquire_owned();
        tokio::pin!(queued);
        loop {
            if self.pending.load(Ordering::SeqCst) <= self.free || self.cpu_to_spare() {
                return None;
            }
            tokio::select! {
                biased;
                slot = &mut queued => return slot.ok(),
                () = tokio::time::sleep(LOOK_EVERY) => {}
            }
        }
    }

    /// Whether the CPUs have room for one more ADD, looked at only if no
    /// other waiting ADD looked in the last [`LOOK_EVERY`].
    fn cpu_to_spare(&self) -> bool {
        let now = tokio::time::Instant::now();
        {
            let mut last = self
                .last_look
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if last.is_some_and(|at| now.duration_since(at) < LOOK_EVERY) {
                return false;
            }
            *last = Some(now);
        }
        !self.load.saturated()
    }
}

#[async_trait]
impl PodNetworks for PacedNetworks {
    fn conf_dir(&self) -> &Path {
        self.inner.conf_dir()
    }

    async fn add(
        &self,
        network: &NetworkConfigList,
        pod: &PodNetwork,
    ) -> Result<AddResult, CniError> {
        let _pending = Pending::enter(&self.pending);
        let slot = self.admit().await;
        let add = self.inner.add(network, pod);
        let Some(slot) = slot else {
            return add.await;
        };
        tokio::pin!(add);
        match tokio::time::timeout(self.slow, &mut add).await {
            Ok(added) => added,
            Err(_) => {
                drop(slot);
                add.await
            }
        }
    }

    async fn del(
        &self,
        network: &NetworkConfigList,
        pod: &PodNetwork,
        prev_result: Option<&serde_json::Value>,
    ) -> Result<(), CniError> {
        self.inner.del(network, pod, prev_result).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Mutex;
    use tokio::sync::oneshot;

    /// ADDs that finish when the test says, counting how many run at once.
    #[derive(Default)]
    struct Gated {
        running: AtomicUsize,
        most: AtomicUsize,
        gates: Mutex<HashMap<String, oneshot::Receiver<()>>>,
        started: Mutex<Vec<String>>,
    }

    impl Gated {
        fn gate(&self, pod: &str) -> oneshot::Sender<()> {
            let (open, gate) = oneshot::channel();
            self.gates.lock().unwrap().insert(pod.to_string(), gate);
            open
        }

        fn started(&self) -> Vec<String> {
            self.started.lock().unwrap().clone()
        }
    }

    #[async_trait]
    impl PodNetworks for Gated {
        fn conf_dir(&self) -> &Path {
            Path::new("/nonexistent")
        }

        async fn add(
            &self,
            _: &NetworkConfigList,
            pod: &PodNetwork,
        ) -> Result<AddResult, CniError> {
            let gate = self.gates.lock().unwrap().remove(&pod.pod_name);
            self.started.lock().unwrap().push(pod.pod_name.clone());
            let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
            self.most.fetch_max(now, Ordering::SeqCst);
            if let Some(gate) = gate {
                let _ = gate.await;
            }
            self.running.fetch_sub(1, Ordering::SeqCst);
            Ok(AddResult {
                raw: serde_json::json!({}),
                ips: Vec::new(),
            })
        }

        async fn del(
            &self,
            _: &NetworkConfigList,
            _: &PodNetwork,
            _: Option<&serde_json::Value>,
        ) -> Result<(), CniError> {
            Ok(())
        }
    }

    struct Load(AtomicBool);

    impl CpuLoad for Load {
        fn saturated(&self) -> bool {
            self.0.load(Ordering::SeqCst)
        }
    }

    fn paced(slots: usize, busy: bool) -> (Arc<PacedNetworks>, Arc<Gated>, Arc<Load>) {
        let gated = Arc::new(Gated::default());
        let load = Arc::new(Load(AtomicBool::new(busy)));
        let paced = PacedNetworks::new(gated.clone(), slots, load.clone(), SLOW_ADD);
        (Arc::new(paced), gated, load)
    }

    fn network() -> NetworkConfigList {
        NetworkConfigList {
            name: "test".into(),
            cni_version: "1.0.0".into(),
            plugins: Vec::new(),
            source: PathBuf::new(),
        }
    }

    fn add(paced: &Arc<PacedNetworks>, name: &str) -> tokio::task::JoinHandle<()> {
        let paced = paced.clone();
        let pod = PodNetwork {
            pod_name: name.to_string(),
            ..PodNetwork::default()
        };
        tokio::spawn(async move {
            paced.add(&network(), &pod).await.unwrap();
        })
    }

    /// Waits for an ADD to finish: a pacing that never lets it go fails
    /// the test instead of hanging it.
    async fn finished(add: tokio::task::JoinHandle<()>) {
        tokio::time::timeout(Duration::from_secs(60), add)
            .await
            .expect("the ADD was let go")
            .unwrap();
    }

    /// Lets every spawned task run as far as it can.
    async fn settle() {
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
    }

    /// Gated ADDs named `{prefix}-{i}`, started in order.
    async fn gated_adds(
        paced: &Arc<PacedNetworks>,
        gated: &Gated,
        prefix: &str,
        count: usize,
    ) -> Vec<(oneshot::Sender<()>, tokio::task::JoinHandle<()>)> {
        let mut adds = Vec::new();
        for i in 0..count {
            let name = format!("{prefix}-{i}");
            let open = gated.gate(&name);
            adds.push((open, add(paced, &name)));
            settle().await;
        }
        adds
    }

    #[tokio::test(start_paused = true)]
    async fn a_few_adds_at_once_are_not_paced() {
        let (paced, gated, _) = paced(1, true);
        let _adds = gated_adds(&paced, &gated, "pod", FREE_PER_SLOT + 1).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        settle().await;
        assert_eq!(gated.started().len(), FREE_PER_SLOT);
    }

    #[tokio::test(start_paused = true)]
    async fn in_a_flood_while_the_cpus_are_busy_adds_wait_for_a_slot() {
        let (paced, gated, _) = paced(2, true);
        let free = 2 * FREE_PER_SLOT;
        let adds = gated_adds(&paced, &gated, "pod", free + 4).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(gated.started().len(), free);
        let mut done = Vec::new();
        for (open, add) in adds {
            let _ = open.send(());
            settle().await;
            done.push(add);
        }
        for add in done {
            finished(add).await;
        }
        assert_eq!(gated.most.load(Ordering::SeqCst), free);
        assert_eq!(gated.started().len(), free + 4);
    }

    #[tokio::test(start_paused = true)]
    async fn with_cpu_to_spare_waiting_adds_go_one_per_look_not_all_at_once() {
        let (paced, gated, load) = paced(1, true);
        let _adds = gated_adds(&paced, &gated, "pod", FREE_PER_SLOT + 3).await;
        assert_eq!(gated.started().len(), FREE_PER_SLOT);
        load.0.store(false, Ordering::SeqCst);
        tokio::time::sleep(LOOK_EVERY + Duration::from_millis(1)).await;
        settle().await;
        assert_eq!(
            gated.started().len(),
            FREE_PER_SLOT + 1,
            "one past the slot per look"
        );
        tokio::time::sleep(LOOK_EVERY * 4).await;
        settle().await;
        assert_eq!(gated.started().len(), FREE_PER_SLOT + 3);
    }

    #[tokio::test(start_paused = true)]
    async fn slots_go_first_come_first_served() {
        let (paced, gated, _) = paced(1, true);
        let mut adds = gated_adds(&paced, &gated, "pod", FREE_PER_SLOT).await;
        // Three wait, one a quarter of a look after the other, and each
        // looks at the CPUs every LOOK_EVERY from when it came.
        let step = LOOK_EVERY / 4;
        let mut waiting = Vec::new();
        for i in 0..3 {
            waiting.push(add(&paced, &format!("waiting-{i}")));
            settle().await;
            tokio::time::sleep(step).await;
        }
        // Just after the first one's third look, before the others' third.
        tokio::time::sleep(LOOK_EVERY * 3 + step / 2 - step * 3).await;
        settle().await;
        assert_eq!(gated.started().len(), FREE_PER_SLOT);
        // The slot's holder ends: the one that has waited longest goes.
        let _ = adds.remove(0).0.send(());
        settle().await;
        let started = gated.started();
        assert_eq!(
            started[FREE_PER_SLOT..],
            ["waiting-0", "waiting-1", "waiting-2"]
        );
        for add in waiting {
            finished(add).await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_add_gives_its_slot_up() {
        let (paced, gated, _) = paced(1, true);
        // The first takes the slot; the others run free, then one waits.
        let adds = gated_adds(&paced, &gated, "pod", FREE_PER_SLOT).await;
        let next = add(&paced, "next");
        settle().await;
        tokio::time::sleep(SLOW_ADD - Duration::from_millis(100)).await;
        settle().await;
        assert!(!gated.started().contains(&"next".to_string()));
        tokio::time::sleep(Duration::from_millis(200)).await;
        settle().await;
        finished(next).await;
        // Given up, not cut short: the slow ADD still runs.
        assert!(!adds[0].1.is_finished(), "the slow ADD goes on");
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_add_frees_its_slot() {
        let (paced, gated, _) = paced(1, true);
        let mut adds = gated_adds(&paced, &gated, "pod", FREE_PER_SLOT + 2).await;
        assert_eq!(gated.started().len(), FREE_PER_SLOT);
        // kubelet gave up on the first RunPodSandbox, which held the slot:
        // its future is dropped, and the first waiting ADD takes the slot
        // (the flood is still on, so the other one still waits).
        adds.remove(0).1.abort();
        settle().await;
        let started = gated.started();
        assert_eq!(started.len(), FREE_PER_SLOT + 1, "{started:?}");
        assert_eq!(
            started.last().map(String::as_str),
            Some(format!("pod-{FREE_PER_SLOT}").as_str())
        );
    }

    #[test]
    fn the_time_tasks_waited_is_the_total_of_the_some_line() {
        let text = "some avg10=0.85 avg60=28.47 avg300=31.76 total=5671755614\n\
                    full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        assert_eq!(waited_micros(text), Some(5_671_755_614));
        assert_eq!(waited_micros("full avg10=0.00 total=3\n"), None);
        assert_eq!(waited_micros("some avg10=0.85\n"), None);
    }

    #[test]
    fn the_run_queue_is_the_fourth_field_of_loadavg() {
        assert_eq!(runnable("0.52 0.40 0.31 3/412 91234\n"), Some(3));
        assert_eq!(runnable("0.52 0.40 0.31"), None);
        assert_eq!(runnable("0.52 0.40 0.31 x/412 1"), None);
        assert!(!RunQueue { cpus: usize::MAX }.saturated());
    }
}
