//! berthd's own Prometheus metrics and the HTTP endpoint serving them.
//!
//! Counters and histograms are updated where things happen (every RPC in
//! [`crate::server::instrument`], image pulls, CNI calls, OOM kills seen);
//! pod, container and shim counts and berthd's own process figures are
//! sampled when the endpoint is scraped. The endpoint is off unless
//! `[metrics] enabled` is set.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::Bytes;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// The content type of the OpenMetrics text format prometheus-client writes.
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RpcLabels {
    /// `RuntimeService/RunPodSandbox`, `ImageService/PullImage`, ...
    pub method: String,
    /// The gRPC code name: `Ok`, `NotFound`, ...
    pub code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// `success` or `failure`.
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CniLabels {
    /// `ADD` or `DEL`.
    pub operation: String,
    /// `success` or `failure`.
    pub result: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// What is sampled at scrape time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub pods_by_state: Vec<(String, i64)>,
    pub containers_by_state: Vec<(String, i64)>,
    pub shims: i64,
}

/// All of berthd's metrics, in one registry.
pub struct Metrics {
    registry: Registry,
    rpc_requests: Family<RpcLabels, Counter>,
    rpc_duration: HistogramFamily<RpcLabels>,
    image_pulls: Family<ResultLabels, Counter>,
    image_pull_bytes: Counter,
    image_pull_duration: HistogramFamily<ResultLabels>,
    image_pulls_in_progress: Gauge,
    cni_duration: HistogramFamily<CniLabels>,
    oom_kills: Counter,
    pods: Family<StateLabels, Gauge>,
    containers: Family<StateLabels, Gauge>,
    shims: Gauge,
    rss: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

fn rpc_histogram() -> Histogram {
    // 1 ms to about 65 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

fn pull_histogram() -> Histogram {
    // 50 ms to about 14 minutes.
    Histogram::new(exponential_buckets(0.05, 2.0, 15))
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("berth");
        let rpc_requests = Family::<RpcLabels, Counter>::default();
        registry.register(
            "rpc_requests",
            "CRI calls served, by method and gRPC code",
            rpc_requests.clone(),
        );
        let rpc_duration: HistogramFamily<RpcLabels> =
            Family::new_with_constructor(rpc_histogram as fn() -> Histogram);
        registry.register(
            "rpc_duration_seconds",
            "Time to answer CRI calls (to the first response for streams), by method and gRPC code",
            rpc_duration.clone(),
        );
        let image_pulls = Family::<ResultLabels, Counter>::default();
        registry.register("image_pulls", "Image pulls, by result", image_pulls.clone());
        let image_pull_bytes = Counter::default();
        registry.register(
            "image_pull_bytes",
            "Size of the images pulled (compressed layers and config)",
            image_pull_bytes.clone(),
        );
        let image_pull_duration: HistogramFamily<ResultLabels> =
            Family::new_with_constructor(pull_histogram as fn() -> Histogram);
        registry.register(
            "image_pull_duration_seconds",
            "Time to pull an image, by result",
            image_pull_duration.clone(),
        );
        let image_pulls_in_progress = Gauge::default();
        registry.register(
            "image_pulls_in_progress",
            "Image pulls under way",
            image_pulls_in_progress.clone(),
        );
        let cni_duration: HistogramFamily<CniLabels> =
            Family::new_with_constructor(rpc_histogram as fn() -> Histogram);
        registry.register(
            "cni_duration_seconds",
            "Time the CNI plugins took to attach (ADD) or detach (DEL) a pod's network, by result",
            cni_duration.clone(),
        );
        let oom_kills = Counter::default();
        registry.register(
            "container_oom_kills",
            "Containers seen to end killed by the OOM killer",
            oom_kills.clone(),
        );
        let pods = Family::<StateLabels, Gauge>::default();
        registry.register("pod_sandboxes", "Pod sandboxes, by state", pods.clone());
        let containers = Family::<StateLabels, Gauge>::default();
        registry.register("containers", "Containers, by state", containers.clone());
        let shims = Gauge::default();
        registry.register("shims", "berth-shim processes alive", shims.clone());
        let rss = Gauge::default();
        registry.register(
            "daemon_resident_memory_bytes",
            "Resident set size of berthd itself",
            rss.clone(),
        );
        registry.register_collector(Box::new(crate::process_metrics::OwnProcess));
        Self {
            registry,
            rpc_requests,
            rpc_duration,
            image_pulls,
            image_pull_bytes,
            image_pull_duration,
            image_pulls_in_progress,
            cni_duration,
            oom_kills,
            pods,
            containers,
            shims,
            rss,
        }
    }

    /// Counts one finished RPC.
    pub fn observe_rpc(&self, method: &str, code: &str, seconds: f64) {
        let labels = RpcLabels {
            method: method.to_string(),
            code: code.to_string(),
        };
        self.rpc_requests.get_or_create(&labels).inc();
        self.rpc_duration.get_or_create(&labels).observe(seconds);
    }

    /// Counts one image pull; `bytes` is the image's size when it succeeded.
    pub fn observe_pull(&self, bytes: Option<u64>, seconds: f64) {
        let result = if bytes.is_some() {
            "success"
        } else {
            "failure"
        };
        let labels = ResultLabels {
            result: result.to_string(),
        };
        self.image_pulls.get_or_create(&labels).inc();
        self.image_pull_duration
            .get_or_create(&labels)
            .observe(seconds);
        if let Some(bytes) = bytes {
            self.image_pull_bytes.inc_by(bytes);
        }
    }

    /// Marks one pull under way until the guard is dropped, also when the
    /// pull's future is cancelled.
    pub fn pull_in_progress(self: &Arc<Self>) -> PullInProgress {
        self.image_pulls_in_progress.inc();
        PullInProgress(self.clone())
    }

    /// Times one CNI call.
    pub fn observe_cni(&self, operation: &str, succeeded: bool, seconds: f64) {
        let labels = CniLabels {
            operation: operation.to_string(),
            result: if succeeded { "success" } else { "failure" }.to_string(),
        };
        self.cni_duration.get_or_create(&labels).observe(seconds);
    }

    /// Counts a container seen to end OOM-killed.
    pub fn observe_oom_kill(&self) {
        self.oom_kills.inc();
    }

    /// The text exposition, with the sampled gauges set from `snapshot`.
    pub fn render(&self, snapshot: &Snapshot) -> String {
        // States with no object left must disappear, not stay at their
        // last count.
        self.pods.clear();
        for (state, count) in &snapshot.pods_by_state {
            self.pods
                .get_or_create(&StateLabels {
                    state: state.clone(),
                })
                .set(*count);
        }
        self.containers.clear();
        for (state, count) in &snapshot.containers_by_state {
            self.containers
                .get_or_create(&StateLabels {
                    state: state.clone(),
                })
                .set(*count);
        }
        self.shims.set(snapshot.shims);
        if let Some(rss) = own_rss_bytes() {
            self.rss.set(i64::try_from(rss).unwrap_or(i64::MAX));
        }
        let mut text = String::new();
        if let Err(err) = prometheus_client::encoding::text::encode(&mut text, &self.registry) {
            tracing::warn!(error = %err, "encoding metrics");
        }
        text
    }
}

/// One image pull under way, for as long as it lives.
pub struct PullInProgress(Arc<Metrics>);

impl Drop for PullInProgress {
    fn drop(&mut self) {
        self.0.image_pulls_in_progress.dec();
    }
}

/// berthd's resident set size, from `/proc/self/status`.
fn own_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_vm_rss(&status)
}

/// `VmRSS:    1234 kB` in bytes.
fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Takes a [`Snapshot`] of the runtime when the endpoint is scraped.
pub type Sampler = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Snapshot> + Send>> + Send + Sync>;

/// Serves `GET /metrics` on `listener` until the process ends. Other paths
/// are 404; every connection gets its own task.
pub async fn serve(listener: tokio::net::TcpListener, metrics: Arc<Metrics>, sampler: Sampler) {
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(err) => {
                tracing::warn!(error = %err, "metrics endpoint: accept");
                continue;
            }
        };
        let metrics = metrics.clone();
        let sampler = sampler.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let metrics = metrics.clone();
                let sampler = sampler.clone();
                async move { Ok::<_, Infallible>(respond(&request, &metrics, &sampler).await) }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            if let Err(err) = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, service)
                .await
            {
                tracing::debug!(error = %err, "metrics endpoint: connection");
            }
        });
    }
}

async fn respond<B>(
    request: &http::Request<B>,
    metrics: &Metrics,
    sampler: &Sampler,
) -> http::Response<Full<Bytes>> {
    let mut response = http::Response::new(Full::new(Bytes::new()));
    if request.uri().path() != "/metrics" {
        *response.status_mut() = http::StatusCode::NOT_FOUND;
        *response.body_mut() = Full::new(Bytes::from_static(b"only /metrics is served\n"));
        return response;
    }
    if request.method() != http::Method::GET && request.method() != http::Method::HEAD {
        *response.status_mut() = http::StatusCode::METHOD_NOT_ALLOWED;
        return response;
    }
    let snapshot = sampler().await;
    *response.body_mut() = Full::new(Bytes::from(metrics.render(&snapshot)));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(CONTENT_TYPE),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rendered_text_has_every_family_and_counts() {
        let metrics = Metrics::new();
        metrics.observe_rpc("RuntimeService/Version", "Ok", 0.002);
        metrics.observe_rpc("RuntimeService/Version", "Ok", 0.004);
        metrics.observe_pull(Some(1000), 1.5);
        metrics.observe_pull(None, 0.1);
        metrics.observe_cni("ADD", true, 0.02);
        metrics.observe_cni("DEL", false, 0.01);
        metrics.observe_oom_kill();
        let snapshot = Snapshot {
            pods_by_state: vec![("ready".into(), 2)],
            containers_by_state: vec![("running".into(), 3), ("exited".into(), 1)],
            shims: 4,
        };
        let text = metrics.render(&snapshot);
        assert!(
            text.contains(
                r#"berth_rpc_requests_total{method="RuntimeService/Version",code="Ok"} 2"#
            ),
            "{text}"
        );
        assert!(
            text.contains("berth_rpc_duration_seconds_bucket{"),
            "{text}"
        );
        assert!(text.contains("berth_image_pull_bytes_total 1000"), "{text}");
        assert!(
            text.contains(r#"berth_image_pulls_total{result="failure"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"berth_pod_sandboxes{state="ready"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"berth_containers{state="exited"} 1"#),
            "{text}"
        );
        assert!(text.contains("berth_shims 4"), "{text}");
        assert!(
            text.contains("berth_daemon_resident_memory_bytes "),
            "{text}"
        );

        assert!(
            text.contains(
                r#"berth_cni_duration_seconds_count{operation="DEL",result="failure"} 1"#
            ),
            "{text}"
        );
        assert!(text.contains("berth_container_oom_kills_total 1"), "{text}");
        assert!(text.contains("berth_image_pulls_in_progress 0"), "{text}");
        for family in [
            "berth_process_cpu_seconds_total ",
            "berth_process_open_fds ",
            "berth_process_max_fds ",
            "berth_process_threads ",
        ] {
            assert!(text.contains(family), "{family} missing from {text}");
        }

        // A state that emptied is gone from the next scrape.
        let text = metrics.render(&Snapshot::default());
        assert!(
            !text.contains(r#"berth_containers{state="exited"}"#),
            "{text}"
        );
    }

    #[test]
    fn a_pull_counts_while_its_guard_lives() {
        let metrics = Arc::new(Metrics::new());
        let first = metrics.pull_in_progress();
        let second = metrics.pull_in_progress();
        let text = metrics.render(&Snapshot::default());
        assert!(text.contains("berth_image_pulls_in_progress 2"), "{text}");
        drop(first);
        drop(second);
        let text = metrics.render(&Snapshot::default());
        assert!(text.contains("berth_image_pulls_in_progress 0"), "{text}");
    }

    #[test]
    fn vm_rss_is_read_in_bytes() {
        let status = "Name:\tberthd\nVmRSS:\t   20480 kB\nThreads:\t4\n";
        assert_eq!(parse_vm_rss(status), Some(20480 * 1024));
        assert_eq!(parse_vm_rss("Name: x\n"), None);
    }
}
