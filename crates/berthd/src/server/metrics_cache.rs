//! The last `ListPodSandboxMetrics` answer, kept encoded until the stats
//! sampler's next pass. Built from one pass, the answer is the same at
//! every call until the next one (or until a pod or container comes or
//! goes) but for each container's `container_last_seen`, which says the
//! call's time. At 250 pods it is about 2 MB of labelled metrics: building
//! and encoding it was half the call's time, and keeping it decoded saved
//! nothing (a copy costs what a build does). So the bytes are kept, with
//! where each last-seen time sits in them, and a call copies them and
//! writes its own time there.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use cri_api::v1::{ContainerMetrics, Metric, PodSandboxMetrics};
use prost::bytes::{Bytes, BytesMut};
use prost::encoding::WireType::{LengthDelimited, Varint};
use prost::encoding::{encode_key, encode_varint, encoded_len_varint, int32, message, string};
use prost::Message;

use super::cadvisor_metrics::{LAST_SEEN, NANOS};

/// What an answer was built from: the sampler's pass and the ids of the
/// pods and containers there were, sorted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Key {
    pub pass: u64,
    pub pods: Vec<String>,
    pub containers: Vec<String>,
}

/// The varint bytes of a time in nanoseconds since the epoch (2^56 to
/// 2^63: from 1972 to 2262) and in seconds (2^28 to 2^35: 1978 to 3058).
/// A time written over a kept one must take as many bytes, or every
/// enclosing length would change.
const NANOS_WIDTH: usize = 9;
const SECONDS_WIDTH: usize = 5;

/// Where one container's last-seen time and value are in an encoded
/// answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Spot {
    timestamp_at: usize,
    seconds_at: usize,
}

/// An answer encoded as `ListPodSandboxMetricsResponse`'s field 1 entries.
struct Kept {
    bytes: Bytes,
    spots: Arc<[Spot]>,
}

#[derive(Default)]
pub(super) struct MetricsCache {
    last: Mutex<Option<(Key, Kept)>>,
    /// Whether a call asked for the answer since berthd started: from then
    /// on it is built after each pass, before any call asks
    /// (`super::list_pod_sandbox_metrics`).
    asked: AtomicBool,
    /// Held while an answer is built: a call that finds none kept does not
    /// build the same 2 MB beside it (`super::list_pod_sandbox_metrics`).
    building: tokio::sync::Mutex<()>,
}

impl MetricsCache {
    /// Notes that a call asked.
    pub fn asked(&self) {
        self.asked.store(true, Ordering::Relaxed);
    }

    /// Whether a call ever asked.
    pub fn ever_asked(&self) -> bool {
        self.asked.load(Ordering::Relaxed)
    }

    /// Taken while building an answer to keep.
    pub async fn building(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.building.lock().await
    }

    /// Taken while building an answer to keep, if no build is under way.
    pub fn try_building(&self) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        self.building.try_lock().ok()
    }

    /// The answer kept for `key`, encoded, each container's last-seen time
    /// set to `now` (nanoseconds since the epoch), as a fresh one has it.
    pub fn get(&self, key: &Key, now: i64) -> Option<Bytes> {
        self.get_if(now, |kept| kept == key)
    }

    /// The answer kept for the pass before `key`'s, with the same pods and
    /// containers, as [`Self::get`] gives it: what a call takes while the
    /// answer of `key`'s pass is being built.
    pub fn get_previous(&self, key: &Key, now: i64) -> Option<Bytes> {
        self.get_if(now, |kept| {
            kept.pass.wrapping_add(1) == key.pass
                && kept.pods == key.pods
                && kept.containers == key.containers
        })
    }

    fn get_if(&self, now: i64, wanted: impl FnOnce(&Key) -> bool) -> Option<Bytes> {
        let (bytes, spots) = {
            let last = self.lock();
            let (kept_key, kept) = last.as_ref()?;
            wanted(kept_key).then(|| (kept.bytes.clone(), kept.spots.clone()))?
        };
        let nanos = fixed_varint::<NANOS_WIDTH>(u64::try_from(now).ok()?)?;
        let seconds = fixed_varint::<SECONDS_WIDTH>(u64::try_from(now).ok()? / NANOS)?;
        let mut copy = BytesMut::from(&bytes[..]);
        for spot in spots.iter() {
            copy[spot.timestamp_at..spot.timestamp_at + NANOS_WIDTH].copy_from_slice(&nanos);
            copy[spot.seconds_at..spot.seconds_at + SECONDS_WIDTH].copy_from_slice(&seconds);
        }
        Some(copy.freeze())
    }

    /// Encodes `answer`, built from `key`, and keeps it in place of the one
    /// before when every container's last-seen time can be rewritten.
    /// Returns the encoded answer.
    pub fn put(&self, key: Option<Key>, answer: &[PodSandboxMetrics]) -> Bytes {
        let (bytes, spots) = encode(answer);
        let bytes = Bytes::from(bytes);
        if let (Some(key), Some(spots)) = (key, spots) {
            *self.lock() = Some((
                key,
                Kept {
                    bytes: bytes.clone(),
                    spots: spots.into(),
                },
            ));
        }
        bytes
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(Key, Kept)>> {
        self.last
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// `value` as a varint of exactly `N` bytes, if it takes that many.
fn fixed_varint<const N: usize>(value: u64) -> Option<[u8; N]> {
    let mut bytes = Vec::with_capacity(N);
    encode_varint(value, &mut bytes);
    bytes.try_into().ok()
}

/// `answer` as `ListPodSandboxMetricsResponse`'s field 1 entries, the bytes
/// prost would write, and where each container's leading last-seen metric
/// keeps its time and value; no spots if one cannot be rewritten in place.
fn encode(answer: &[PodSandboxMetrics]) -> (Vec<u8>, Option<Vec<Spot>>) {
    let mut buf = Vec::with_capacity(message::encoded_len_repeated(1, answer));
    let mut spots = Some(Vec::new());
    // Field by field in tag order, as prost's generated encoders write.
    for pod in answer {
        encode_key(1, LengthDelimited, &mut buf);
        encode_varint(pod.encoded_len() as u64, &mut buf);
        if !pod.pod_sandbox_id.is_empty() {
            string::encode(1, &pod.pod_sandbox_id, &mut buf);
        }
        message::encode_repeated(2, &pod.metrics, &mut buf);
        for container in &pod.container_metrics {
            let spot = encode_container(container, &mut buf);
            match (&mut spots, spot) {
                (Some(spots), Some(spot)) => spots.push(spot),
                _ => spots = None,
            }
        }
    }
    (buf, spots)
}

/// One `ContainerMetrics` as field 3 of its pod, and where its leading
/// last-seen metric keeps its time and value.
fn encode_container(container: &ContainerMetrics, buf: &mut Vec<u8>) -> Option<Spot> {
    encode_key(3, LengthDelimited, buf);
    encode_varint(container.encoded_len() as u64, buf);
    if !container.container_id.is_empty() {
        string::encode(1, &container.container_id, buf);
    }
    let (first, rest) = container.metrics.split_first()?;
    let spot = if first.name == LAST_SEEN {
        encode_last_seen(first, buf)
    } else {
        message::encode(2, first, buf);
        None
    };
    message::encode_repeated(2, rest, buf);
    spot
}

/// A last-seen metric as field 2 of its container, and where its time and
/// value are, if each takes its fixed width.
fn encode_last_seen(metric: &Metric, buf: &mut Vec<u8>) -> Option<Spot> {
    encode_key(2, LengthDelimited, buf);
    encode_varint(metric.encoded_len() as u64, buf);
    string::encode(1, &metric.name, buf);
    let mut timestamp_at = None;
    if metric.timestamp != 0 {
        encode_key(2, Varint, buf);
        // int64 is the two's complement varint: a time before 1970 takes
        // ten bytes, and has no spot.
        let value = metric.timestamp as u64;
        timestamp_at = (encoded_len_varint(value) == NANOS_WIDTH).then_some(buf.len());
        encode_varint(value, buf);
    }
    if metric.metric_type != 0 {
        int32::encode(3, &metric.metric_type, buf);
    }
    string::encode_repeated(4, &metric.label_values, buf);
    let mut seconds_at = None;
    if let Some(value) = &metric.value {
        encode_key(5, LengthDelimited, buf);
        encode_varint(value.encoded_len() as u64, buf);
        if value.value != 0 {
            encode_key(1, Varint, buf);
            seconds_at = (encoded_len_varint(value.value) == SECONDS_WIDTH).then_some(buf.len());
            encode_varint(value.value, buf);
        }
    }
    Some(Spot {
        timestamp_at: timestamp_at?,
        seconds_at: seconds_at?,
    })
}

#[cfg(test)]
mod tests {
    use cri_api::v1::{ListPodSandboxMetricsResponse, UInt64Value};

    use super::*;

    const AT: i64 = 1_800_000_000_500_000_000;

    fn metric(name: &str, timestamp: i64, value: u64) -> Metric {
        Metric {
            name: name.into(),
            timestamp,
            metric_type: 1,
            label_values: vec!["c1".into(), "web".into(), "busybox".into()],
            value: Some(UInt64Value { value }),
        }
    }

    fn key(pass: u64, containers: &[&str]) -> Key {
        Key {
            pass,
            pods: vec!["pod".into()],
            containers: containers.iter().map(|id| id.to_string()).collect(),
        }
    }

    fn container(id: &str, last_seen_at: i64) -> ContainerMetrics {
        ContainerMetrics {
            container_id: id.into(),
            metrics: vec![
                metric(LAST_SEEN, last_seen_at, (last_seen_at as u64) / NANOS),
                metric("container_memory_rss", 5, 1024),
                metric("container_processes", 5, 0),
            ],
        }
    }

    fn answer(last_seen_at: i64) -> Vec<PodSandboxMetrics> {
        vec![
            PodSandboxMetrics {
                pod_sandbox_id: "pod".into(),
                metrics: vec![metric("container_memory_rss", 5, 4096)],
                container_metrics: vec![
                    container("app", last_seen_at),
                    container("sidecar", last_seen_at),
                ],
            },
            PodSandboxMetrics {
                pod_sandbox_id: String::new(),
                metrics: Vec::new(),
                container_metrics: vec![ContainerMetrics::default()],
            },
        ]
    }

    fn decode(bytes: Bytes) -> Vec<PodSandboxMetrics> {
        ListPodSandboxMetricsResponse::decode(bytes)
            .expect("decodes")
            .pod_metrics
    }

    #[test]
    fn the_kept_bytes_are_the_ones_prost_writes() {
        let answer = answer(AT);
        let prost = ListPodSandboxMetricsResponse {
            pod_metrics: answer.clone(),
            encoded: Bytes::new(),
        }
        .encode_to_vec();
        let (ours, spots) = encode(&answer);
        assert_eq!(ours, prost);
        assert_eq!(
            spots.map(|spots| spots.len()),
            None,
            "the empty container has none"
        );
        let (ours, spots) = encode(&answer[..1]);
        assert_eq!(decode(Bytes::from(ours)), answer[..1]);
        assert_eq!(spots.map(|spots| spots.len()), Some(2));
    }

    #[test]
    fn an_answer_is_given_again_only_for_its_own_pass_and_ids() {
        let cache = MetricsCache::default();
        assert_eq!(cache.get(&key(1, &["app"]), AT), None, "nothing kept yet");
        let sent = cache.put(Some(key(1, &["app"])), &answer(AT)[..1]);
        assert_eq!(decode(sent), answer(AT)[..1]);
        assert!(cache.get(&key(1, &["app"]), AT).is_some());
        assert_eq!(cache.get(&key(2, &["app"]), AT), None, "a later pass");
        assert_eq!(
            cache.get(&key(1, &["app", "new"]), AT),
            None,
            "a container came"
        );
        assert_eq!(cache.get(&key(1, &[]), AT), None, "a container went");
    }

    #[test]
    fn the_pass_befores_answer_is_given_only_with_the_same_ids() {
        let cache = MetricsCache::default();
        cache.put(Some(key(1, &["app"])), &answer(AT)[..1]);
        let later = AT + 10_000_000_000;
        let given = cache.get_previous(&key(2, &["app"]), later).expect("kept");
        assert_eq!(decode(given), answer(later)[..1]);
        assert_eq!(
            cache.get_previous(&key(1, &["app"]), AT),
            None,
            "its own pass"
        );
        assert_eq!(
            cache.get_previous(&key(3, &["app"]), AT),
            None,
            "two passes on"
        );
        assert_eq!(
            cache.get_previous(&key(2, &["app", "new"]), AT),
            None,
            "a container came"
        );
    }

    #[test]
    fn a_kept_answer_says_it_was_seen_at_the_call() {
        let cache = MetricsCache::default();
        cache.put(Some(key(1, &["app"])), &answer(AT)[..1]);
        let later = AT + 25_500_000_000;
        let given = cache.get(&key(1, &["app"]), later).expect("kept");
        assert_eq!(
            decode(given),
            answer(later)[..1],
            "only the last-seen time moved"
        );
    }

    #[test]
    fn an_answer_whose_times_cannot_be_rewritten_is_not_kept() {
        let cache = MetricsCache::default();
        // Seconds since the epoch in four varint bytes: 1970's.
        let early = 100_000_000 * NANOS as i64;
        let sent = cache.put(Some(key(1, &["app"])), &answer(early)[..1]);
        assert_eq!(decode(sent), answer(early)[..1], "still sent whole");
        assert_eq!(cache.get(&key(1, &["app"]), early), None);
        // Nor given for a time of another width.
        cache.put(Some(key(1, &["app"])), &answer(AT)[..1]);
        assert_eq!(cache.get(&key(1, &["app"]), early), None);
        assert!(cache.get(&key(1, &["app"]), AT).is_some());
    }
}
