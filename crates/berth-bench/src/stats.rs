//! What kubelet asks a full node over and over: the stats RPCs timed one
//! after another, and every other pod's status, list and stats polled while
//! one container's shim is stopped or its cgroup frozen.

use std::time::{Duration, Instant};

use cri_api::v1::{
    ContainerFilter, ContainerState, ContainerStatsFilter, ContainerStatusRequest,
    ListContainerStatsRequest, ListContainersRequest, ListPodSandboxMetricsRequest,
    ListPodSandboxRequest, ListPodSandboxStatsRequest, PodSandboxFilter, PodSandboxStatsFilter,
};
use prost::Message;
use tonic::{Code, Request, Status};

use crate::client::Cri;
use crate::record::{ms, Out};
use crate::workload::{labels, LABEL};

/// How long one polled RPC may take before it counts as stalled: a stopped
/// shim must not hang the bench, and the timeout shows in the samples.
const RPC_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one stats RPC may take: containerd's ListPodSandboxMetrics
/// takes about 0.1 s per pod.
const STATS_TIMEOUT: Duration = Duration::from_secs(120);
/// Once an RPC's calls have taken this long in all, it is not repeated:
/// the run stays bounded where a runtime takes seconds per call.
const STATS_BUDGET: Duration = Duration::from_secs(60);
/// How long the stalled container's own status is waited for: longer than
/// berthd's 30 s shim-call bound, so that what a runtime does at its own
/// bound is what is measured.
const OWN_STATUS_TIMEOUT: Duration = Duration::from_secs(40);

/// ListContainers and ListContainerStats calls per polling round: one a
/// round gave its p99 from 10 samples in full mode, which was the slowest
/// call of the ten, a scheduling hiccup on a loaded node rather than a
/// property of either runtime. A nearest-rank p99 of at most 100 samples is
/// still their slowest; ten a round give 600 in one full-mode poll of 60
/// rounds, 1800 over bench.sh's three repetitions, so one slow call no
/// longer is the p99 (one poll's slow round, ten calls in a row, was).
const LISTS_PER_ROUND: usize = 10;
/// Once one phase's ListContainerStats calls have taken this long in all,
/// the rest of its rounds leave them out: a runtime whose stats wait out
/// the 10 s timeout for a stopped shim would take 50 minutes otherwise.
const POLL_STATS_BUDGET: Duration = Duration::from_secs(30);

/// With `BENCH_SLOW_MS` set, each polled call slower than that many
/// milliseconds is printed with its round and wall-clock time, to be set
/// against the runtime's own log (berthd's handler times and stats sampler
/// passes at debug).
struct SlowCalls {
    metric: String,
    over_ms: Option<f64>,
}

impl SlowCalls {
    fn from_env(metric: &str) -> Self {
        Self {
            metric: metric.to_string(),
            over_ms: std::env::var("BENCH_SLOW_MS")
                .ok()
                .and_then(|value| value.parse().ok()),
        }
    }

    fn note(&self, rpc: &str, round: usize, took_ms: f64) {
        if self.over_ms.is_some_and(|over| took_ms > over) {
            let at = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs_f64();
            eprintln!(
                "berth-bench: {}: slow {rpc} {took_ms:.2} ms in round {round} at {at:.3}",
                self.metric
            );
        }
    }
}

/// How many polling rounds, and how far apart their starts are at least.
pub struct Rounds {
    pub count: usize,
    pub every: Duration,
}

impl Rounds {
    /// How long after one round's start the next starts at the soonest:
    /// `every` on average, drawn between half and one and a half of it.
    /// Rounds exactly `every` apart fell in step with a stall of this
    /// machine's that comes every 3 s (every tenth round at 300 ms), so
    /// that one poll had a slow round every ten and the next none, by the
    /// phase it happened to start at; spaced at random, every poll meets
    /// such a stall about as often as it comes.
    pub fn gap(&self) -> Duration {
        self.every.mul_f64(0.5 + fastrand::f64())
    }
}

fn timed<T>(message: T, timeout: Duration) -> Request<T> {
    let mut request = Request::new(message);
    request.set_timeout(timeout);
    request
}

/// The stats RPCs kubelet makes (and the two lists for reference), each
/// timed `n` times in a row, or until its calls took [`STATS_BUDGET`] in
/// all, after one call of each that is not timed. An RPC the runtime does
/// not implement is left out of the records (and said so).
pub async fn stats(cri: &Cri, out: &Out, n: usize, metric: &str) -> Result<(), String> {
    let mut rt = cri.runtime.clone();
    let names = [
        "ListPodSandboxStats",
        "ListContainerStats",
        "ListPodSandboxMetrics",
        "ListContainers",
        "ListPodSandbox",
    ];
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    let mut unimplemented = [false; 5];
    let mut spent = [Duration::ZERO; 5];
    // Each stats RPC's last answer, for [`answer_record`].
    let mut last_pod_stats = None;
    let mut last_container_stats = None;
    let mut last_metrics = None;
    // Round 0 warms up, untimed: kubelet keeps one connection for its
    // life, and this client's first answers on its new one take longer
    // (berth's first ListPodSandboxMetrics at 110 pods 10-12 ms, its next
    // ones 2 ms).
    for round in 0..=n {
        for (i, name) in names.iter().enumerate() {
            if unimplemented[i] || spent[i] >= STATS_BUDGET {
                continue;
            }
            let t = Instant::now();
            let result: Result<(), Status> = match i {
                0 => rt
                    .list_pod_sandbox_stats(timed(
                        ListPodSandboxStatsRequest {
                            filter: Some(PodSandboxStatsFilter::default()),
                        },
                        STATS_TIMEOUT,
                    ))
                    .await
                    .map(|answer| last_pod_stats = Some(answer.into_inner())),
                1 => rt
                    .list_container_stats(timed(
                        ListContainerStatsRequest {
                            filter: Some(ContainerStatsFilter::default()),
                        },
                        STATS_TIMEOUT,
                    ))
                    .await
                    .map(|answer| last_container_stats = Some(answer.into_inner())),
                2 => rt
                    .list_pod_sandbox_metrics(timed(ListPodSandboxMetricsRequest {}, STATS_TIMEOUT))
                    .await
                    .map(|answer| last_metrics = Some(answer.into_inner())),
                3 => rt
                    .list_containers(timed(
                        ListContainersRequest {
                            filter: Some(ContainerFilter::default()),
                        },
                        STATS_TIMEOUT,
                    ))
                    .await
                    .map(drop),
                _ => rt
                    .list_pod_sandbox(timed(
                        ListPodSandboxRequest {
                            filter: Some(PodSandboxFilter::default()),
                        },
                        STATS_TIMEOUT,
                    ))
                    .await
                    .map(drop),
            };
            spent[i] += t.elapsed();
            let elapsed = ms(t.elapsed());
            match result {
                Ok(()) if round > 0 => samples[i].push(elapsed),
                Ok(()) => {}
                Err(s) if s.code() == Code::Unimplemented => {
                    eprintln!("berth-bench: {name}: not implemented by this runtime");
                    unimplemented[i] = true;
                }
                Err(s) => return Err(format!("{name}: {s}")),
            }
        }
    }
    for (name, s) in names.iter().zip(&samples) {
        if !s.is_empty() {
            out.write(&format!("{metric}/{name}"), "ms", s)?;
        }
    }
    // Where a stats call's time goes: each answer's encoded size, and how
    // long this client takes to decode those bytes alone (what every call
    // pays after the transfer, and a share kubelet's decoder pays too).
    if let Some(answer) = &last_pod_stats {
        answer_record(out, &format!("{metric}/ListPodSandboxStats"), answer)?;
    }
    if let Some(answer) = &last_container_stats {
        answer_record(out, &format!("{metric}/ListContainerStats"), answer)?;
    }
    if let Some(answer) = &last_metrics {
        answer_record(out, &format!("{metric}/ListPodSandboxMetrics"), answer)?;
    }
    Ok(())
}

/// How many times one answer's bytes are decoded for [`answer_record`]'s
/// timing.
const DECODES: usize = 5;

fn answer_record<M: Message + Default>(out: &Out, metric: &str, answer: &M) -> Result<(), String> {
    let bytes = answer.encode_to_vec();
    let mut decodes = Vec::with_capacity(DECODES);
    for _ in 0..DECODES {
        let t = Instant::now();
        M::decode(bytes.as_slice()).map_err(|err| format!("{metric}: decode: {err}"))?;
        decodes.push(ms(t.elapsed()));
    }
    // usize to f64: an answer's size is far below 2^52 bytes.
    out.write(&format!("{metric} answer"), "bytes", &[bytes.len() as f64])?;
    out.write(&format!("{metric} client decode"), "ms", &decodes)
}

/// One running container of the pods labelled `tag`: prints its id, its
/// process's pid and (berth) its shim dir, tab-separated, from verbose
/// ContainerStatus.
pub async fn pick(cri: &Cri, tag: &str) -> Result<(), String> {
    let mut rt = cri.runtime.clone();
    let containers = running(cri, tag).await?;
    // The middle one: neither the first nor the last pod started.
    let id = containers
        .get(containers.len() / 2)
        .ok_or_else(|| format!("no running container labelled {LABEL}={tag}"))?
        .clone();
    let response = rt
        .container_status(ContainerStatusRequest {
            container_id: id.clone(),
            verbose: true,
        })
        .await
        .map_err(|s| format!("ContainerStatus {id}: {s}"))?
        .into_inner();
    let info: serde_json::Value = response
        .info
        .get("info")
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_default();
    let pid = info.get("pid").and_then(|p| p.as_i64()).unwrap_or(0);
    let shim_dir = info.get("shimDir").and_then(|d| d.as_str()).unwrap_or("");
    println!("{id}\t{pid}\t{shim_dir}");
    Ok(())
}

/// The running containers labelled `tag`, by id.
pub async fn running(cri: &Cri, tag: &str) -> Result<Vec<String>, String> {
    let mut rt = cri.runtime.clone();
    let mut ids: Vec<String> = rt
        .list_containers(ListContainersRequest {
            filter: Some(ContainerFilter {
                state: Some(cri_api::v1::ContainerStateValue {
                    state: ContainerState::ContainerRunning as i32,
                }),
                label_selector: labels(tag),
                ..Default::default()
            }),
        })
        .await
        .map_err(|s| format!("ListContainers: {s}"))?
        .into_inner()
        .containers
        .into_iter()
        .map(|c| c.id)
        .collect();
    ids.sort();
    Ok(ids)
}

/// `rounds` rounds of: ContainerStatus of every running container labelled
/// `tag` but `skip`, then [`LISTS_PER_ROUND`] ListContainers and as many
/// ListContainerStats (these until they took [`POLL_STATS_BUDGET`]).
/// With `stalled`, the status of that container is asked once, alongside:
/// its latency is recorded under `<metric>/own ContainerStatus` and what it
/// reports is printed. An RPC that times out counts at its timeout and in
/// `<metric>/timeouts`.
pub async fn poll(
    cri: &Cri,
    out: &Out,
    tag: &str,
    skip: &str,
    rounds: Rounds,
    metric: &str,
    stalled: bool,
) -> Result<(), String> {
    let others: Vec<String> = running(cri, tag)
        .await?
        .into_iter()
        .filter(|id| id != skip)
        .collect();
    let own = stalled.then(|| {
        let mut rt = cri.runtime.clone();
        let id = skip.to_string();
        tokio::spawn(async move {
            let t = Instant::now();
            let result = rt
                .container_status(timed(
                    ContainerStatusRequest {
                        container_id: id,
                        verbose: false,
                    },
                    OWN_STATUS_TIMEOUT,
                ))
                .await;
            let took = ms(t.elapsed());
            let said = match result {
                Ok(r) => r
                    .into_inner()
                    .status
                    .and_then(|s| ContainerState::try_from(s.state).ok())
                    .map_or("no status".to_string(), |s| s.as_str_name().to_string()),
                Err(s) => format!("error {:?}: {}", s.code(), s.message()),
            };
            (took, said)
        })
    });
    let mut rt = cri.runtime.clone();
    let (mut status, mut list, mut stats) = (Vec::new(), Vec::new(), Vec::new());
    let mut timeouts = 0usize;
    let mut stats_spent = Duration::ZERO;
    let slow = SlowCalls::from_env(metric);
    // A timed-out call counts at its timeout; any other error fails the run.
    let mut take = |result: Result<(), Status>,
                    t: Instant,
                    into: &mut Vec<f64>,
                    (rpc, round): (&str, usize)| {
        match result {
            Ok(()) => {}
            Err(s) if s.code() == Code::DeadlineExceeded || s.code() == Code::Cancelled => {
                timeouts += 1
            }
            Err(s) => return Err(s.to_string()),
        }
        let took = ms(t.elapsed());
        slow.note(rpc, round, took);
        into.push(took);
        Ok(())
    };
    let mut next_round = Instant::now();
    for round in 0..rounds.count {
        // Rounds `every` apart on average (or right after the one before,
        // if that took longer): a poll then spans the same stretch of the
        // runtime's own periodic work, berthd's stats sampler passes,
        // whether or not a shim is stalled.
        tokio::time::sleep_until(next_round.into()).await;
        next_round = Instant::now() + rounds.gap();
        for id in &others {
            let t = Instant::now();
            let r = rt
                .container_status(timed(
                    ContainerStatusRequest {
                        container_id: id.clone(),
                        verbose: false,
                    },
                    RPC_TIMEOUT,
                ))
                .await
                .map(drop);
            take(r, t, &mut status, ("ContainerStatus", round))
                .map_err(|e| format!("ContainerStatus {id}: {e}"))?;
        }
        for _ in 0..LISTS_PER_ROUND {
            let t = Instant::now();
            let r = rt
                .list_containers(timed(
                    ListContainersRequest {
                        filter: Some(ContainerFilter::default()),
                    },
                    RPC_TIMEOUT,
                ))
                .await
                .map(drop);
            take(r, t, &mut list, ("ListContainers", round))
                .map_err(|e| format!("ListContainers: {e}"))?;
        }
        for _ in 0..LISTS_PER_ROUND {
            if stats_spent >= POLL_STATS_BUDGET {
                break;
            }
            let t = Instant::now();
            let r = rt
                .list_container_stats(timed(
                    ListContainerStatsRequest {
                        filter: Some(ContainerStatsFilter::default()),
                    },
                    RPC_TIMEOUT,
                ))
                .await
                .map(drop);
            stats_spent += t.elapsed();
            take(r, t, &mut stats, ("ListContainerStats", round))
                .map_err(|e| format!("ListContainerStats: {e}"))?;
        }
    }
    out.write(&format!("{metric}/ContainerStatus"), "ms", &status)?;
    out.write(&format!("{metric}/ListContainers"), "ms", &list)?;
    out.write(&format!("{metric}/ListContainerStats"), "ms", &stats)?;
    out.write(&format!("{metric}/timeouts"), "count", &[timeouts as f64])?;
    if let Some(own) = own {
        let (took, said) = own.await.map_err(|err| err.to_string())?;
        eprintln!("berth-bench: {metric}: own ContainerStatus took {took:.1} ms: {said}");
        out.write_with(
            &format!("{metric}/own ContainerStatus"),
            "ms",
            &[took],
            &[("reported", said.as_str())],
        )?;
    }
    Ok(())
}
