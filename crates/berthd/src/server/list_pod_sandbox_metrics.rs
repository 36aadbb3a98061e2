//! `ListPodSandboxMetrics`: every pod's usage as cadvisor metrics
//! (KEP-2371).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use cri_api::v1::{ListPodSandboxMetricsResponse, PodSandboxMetrics};
use futures_util::stream::{self, StreamExt};
use prost::bytes::Bytes;
use tonic::Status;

use super::cadvisor_metrics::{pod_metrics, MetricsContext};
use super::container_stats::{ReadFor, READS_AT_ONCE};
use super::metrics_cache::Key;
use super::CriService;
use crate::block_devices;
use crate::clock::now_nanos;
use crate::container::store::ContainerRecord;
use crate::fs_capacity;
use crate::sandbox::store::SandboxRecord;

impl CriService {
    pub(super) async fn serve_list_pod_sandbox_metrics(
        &self,
    ) -> Result<ListPodSandboxMetricsResponse, Status> {
        Ok(ListPodSandboxMetricsResponse {
            pod_metrics: Vec::new(),
            encoded: self.encoded_pod_metrics().await,
        })
    }

    /// Every pod's metrics, encoded, for a call: see
    /// [`Self::current_pod_metrics`]. Noted as asked, so that the answer is
    /// built after each sampler pass from then on ([`Self::keep_metrics_warm`]).
    pub(super) async fn encoded_pod_metrics(&self) -> Bytes {
        self.kept_metrics.asked();
        self.current_pod_metrics().await
    }

    /// Every pod's metrics, encoded: the answer kept from before when the
    /// sampler's last pass covers every pod and container and it was built
    /// from that pass, else built now (and kept when the pass covered it).
    /// One build at a time: a call that finds none kept while another is
    /// being built takes the pass before's answer when it has the same pods
    /// and containers (values one period older, as a call just before the
    /// pass got), else waits for that build and takes it if it is for its
    /// pass.
    async fn current_pod_metrics(&self) -> Bytes {
        let context = self.context();
        let containers = context.containers.store.published_all();
        let records = context.sandboxes.store.published_all();
        let key = self.metrics_key(&records, &containers, now_nanos());
        let kept = || {
            key.as_ref()
                .and_then(|key| self.kept_metrics.get(key, now_nanos()))
        };
        if let Some(answer) = kept() {
            return answer;
        }
        let _building = match self.kept_metrics.try_building() {
            Some(building) => building,
            None => {
                if let Some(answer) = key
                    .as_ref()
                    .and_then(|key| self.kept_metrics.get_previous(key, now_nanos()))
                {
                    return answer;
                }
                self.kept_metrics.building().await
            }
        };
        if let Some(answer) = kept() {
            return answer;
        }
        let answer = self
            .build_pod_metrics(records, &containers, now_nanos())
            .await;
        // Kept only if no pass ended while it was built: then every value
        // in it is the key's pass's.
        let key = key.filter(|key| {
            let pass = context.stats.pass_covering(
                key.pods.iter().map(String::as_str),
                key.containers.iter().map(String::as_str),
                now_nanos(),
            );
            pass == Some(key.pass)
        });
        self.kept_metrics.put(key, &answer)
    }

    /// Builds the answer after each sampler pass once a call asked for it,
    /// so that a call finds it kept instead of building 2 MB at 250 pods
    /// while kubelet waits. kubelet asks at each scrape of its
    /// `/metrics/cadvisor`, at whatever interval the scraper has (a window
    /// after each call left every call of a scraper slower than it to build
    /// its own); a build costs about 10 ms of cpu per pass at 250 pods. Runs
    /// for as long as berthd does.
    pub fn keep_metrics_warm(&self) -> tokio::task::JoinHandle<()> {
        let mut passes = self.context().stats.passes();
        let service = self.clone();
        tokio::spawn(async move {
            while passes.changed().await.is_ok() {
                service.warm_after_pass().await;
            }
        })
    }

    /// After a pass: builds and keeps the answer if a call ever asked for
    /// it. Returns whether it did.
    async fn warm_after_pass(&self) -> bool {
        if !self.kept_metrics.ever_asked() {
            return false;
        }
        drop(self.current_pod_metrics().await);
        true
    }

    /// Every pod's metrics, built now.
    pub(super) async fn all_pod_metrics(&self) -> Vec<PodSandboxMetrics> {
        let context = self.context();
        let containers = context.containers.store.published_all();
        let records = context.sandboxes.store.published_all();
        self.build_pod_metrics(records, &containers, now_nanos())
            .await
    }

    /// What an answer built now would come from, if the sampler's last
    /// pass holds all of it.
    fn metrics_key(
        &self,
        pods: &[Arc<SandboxRecord>],
        containers: &[Arc<ContainerRecord>],
        now: i64,
    ) -> Option<Key> {
        let sorted = |ids: Vec<String>| {
            let mut ids = ids;
            ids.sort_unstable();
            ids
        };
        let pods = sorted(pods.iter().map(|record| record.id.clone()).collect());
        let containers = sorted(containers.iter().map(|record| record.id.clone()).collect());
        let pass = self.context().stats.pass_covering(
            pods.iter().map(String::as_str),
            containers.iter().map(String::as_str),
            now,
        )?;
        Some(Key {
            pass,
            pods,
            containers,
        })
    }

    async fn build_pod_metrics(
        &self,
        records: Vec<Arc<SandboxRecord>>,
        containers: &[Arc<ContainerRecord>],
        now: i64,
    ) -> Vec<PodSandboxMetrics> {
        let images: HashMap<String, String> = containers
            .iter()
            .map(|record| (record.id.clone(), record.image_ref.clone()))
            .collect();
        let usages: Vec<_> = stream::iter(records)
            .map(|record| async move { self.pod_sandbox_usage(&record, ReadFor::Metrics).await })
            .buffered(READS_AT_ONCE)
            .collect()
            .await;
        let mut numbers: HashSet<(u64, u64)> = usages
            .iter()
            .flat_map(|usage| std::iter::once(&usage.sample).chain(usage.containers.values()))
            .filter_map(|sample| sample.cgroup.as_ref()?.io.as_ref())
            .flat_map(|io| io.devices.iter())
            .map(|device| (device.major, device.minor))
            .collect();
        // Each device named once per call, not once per cgroup; the
        // writable layers' filesystem measured once too.
        let layers_dir = self.context().containers.layers_dir.clone();
        let (devices, layers_fs) = tokio::task::spawn_blocking(move || {
            let layers_fs = fs_capacity::capacity(&layers_dir).ok();
            numbers.extend(layers_fs.map(|fs| fs.device));
            (block_devices::names(numbers), layers_fs)
        })
        .await
        .unwrap_or_default();
        let context = MetricsContext {
            images: &images,
            devices: &devices,
            layers_fs,
            now,
        };
        usages
            .iter()
            .map(|usage| pod_metrics(usage, &context))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use prost::Message;

    use super::*;
    use crate::container::lifecycle_tests::{container, fixture, Fixture};
    use crate::server::fake_service::sampled_service;
    use crate::stats_sampler::{HostUsage, StatsSampler};

    fn containers_of(answer: &[PodSandboxMetrics]) -> Vec<String> {
        let mut ids: Vec<String> = answer
            .iter()
            .flat_map(|pod| &pod.container_metrics)
            .map(|container| container.container_id.clone())
            .collect();
        ids.sort();
        ids
    }

    /// The call's answer, decoded as a client does.
    async fn answer_of(svc: &CriService) -> Vec<PodSandboxMetrics> {
        let bytes = svc.encoded_pod_metrics().await;
        ListPodSandboxMetricsResponse::decode(bytes)
            .expect("decodes")
            .pod_metrics
    }

    /// A pod with one container, app, and a service on a sampler that
    /// passes only when a test says so.
    struct Sampled {
        f: Fixture,
        pod: String,
        app: String,
        sampler: Arc<StatsSampler>,
        svc: CriService,
        source: HostUsage,
    }

    async fn sampled() -> Sampled {
        let f = fixture().await;
        let pod = f.pod("web", "").await;
        let app = f.create_ok(&pod, container("app")).await;
        let sampler = Arc::new(StatsSampler::new(Duration::from_secs(10)));
        let svc = sampled_service(&f, sampler.clone());
        let source = HostUsage {
            containers: f.manager.clone(),
        };
        Sampled {
            f,
            pod,
            app,
            sampler,
            svc,
            source,
        }
    }

    #[tokio::test]
    async fn the_answer_is_kept_for_its_pass_and_built_again_when_ids_or_the_pass_change() {
        let Sampled {
            f,
            pod,
            app,
            sampler,
            svc,
            source,
        } = sampled().await;
        sampler.sample(&source).await;

        let first = answer_of(&svc).await;
        assert_eq!(containers_of(&first), vec![app.clone()]);
        let key = |pass, containers: &[&String]| Key {
            pass,
            pods: vec![pod.clone()],
            containers: containers.iter().map(|id| id.to_string()).collect(),
        };
        assert!(
            svc.kept_metrics
                .get(&key(1, &[&app]), now_nanos())
                .is_some(),
            "kept for the pass it came from"
        );
        let again = answer_of(&svc).await;
        assert_eq!(again.len(), first.len());
        assert_eq!(containers_of(&again), vec![app.clone()]);

        // Newer than the pass: read now, and the answer holds it.
        let newer = f.create_ok(&pod, container("newer")).await;
        let mut both = [app.clone(), newer.clone()];
        both.sort();
        assert_eq!(containers_of(&answer_of(&svc).await), both);

        sampler.sample(&source).await;
        assert_eq!(containers_of(&answer_of(&svc).await), both);
        let mut ids = [&app, &newer];
        ids.sort();
        assert!(
            svc.kept_metrics.get(&key(2, &ids), now_nanos()).is_some(),
            "kept again for the next pass"
        );
        assert!(svc
            .kept_metrics
            .get(&key(1, &[&app]), now_nanos())
            .is_none());
    }

    #[tokio::test]
    async fn after_a_pass_the_answer_is_built_once_a_call_asked_for_it() {
        let Sampled {
            f: _f,
            pod,
            app,
            sampler,
            svc,
            source,
        } = sampled().await;
        let key = |pass| Key {
            pass,
            pods: vec![pod.clone()],
            containers: vec![app.clone()],
        };

        sampler.sample(&source).await;
        assert!(!svc.warm_after_pass().await, "no call asked yet");
        assert!(svc.kept_metrics.get(&key(1), now_nanos()).is_none());

        answer_of(&svc).await;
        sampler.sample(&source).await;
        assert!(svc.warm_after_pass().await, "a call asked");
        assert!(
            svc.kept_metrics.get(&key(2), now_nanos()).is_some(),
            "built for the new pass before any call"
        );

        // No call since: still built, for the scrape after a long interval.
        sampler.sample(&source).await;
        assert!(svc.warm_after_pass().await);
        assert!(svc.kept_metrics.get(&key(3), now_nanos()).is_some());
    }

    #[tokio::test]
    async fn while_a_passs_answer_is_built_a_call_takes_the_pass_befores() {
        let Sampled {
            f,
            pod,
            app,
            sampler,
            svc,
            source,
        } = sampled().await;
        sampler.sample(&source).await;
        answer_of(&svc).await;
        sampler.sample(&source).await;

        let building = svc.kept_metrics.building().await;
        let answer = tokio::time::timeout(Duration::from_secs(30), answer_of(&svc))
            .await
            .expect("answered without waiting for the build");
        assert_eq!(containers_of(&answer), vec![app.clone()]);
        drop(building);

        // A container came: the pass before's answer lacks it, so the call
        // waits for the build under way and then builds its own.
        let newer = f.create_ok(&pod, container("newer")).await;
        let building = svc.kept_metrics.building().await;
        let (answer, ()) = tokio::join!(answer_of(&svc), async {
            tokio::task::yield_now().await;
            drop(building);
        });
        let mut both = [app.clone(), newer.clone()];
        both.sort();
        assert_eq!(containers_of(&answer), both);
    }

    #[tokio::test]
    async fn the_warming_task_follows_the_samplers_passes() {
        let Sampled {
            f: _f,
            pod,
            app,
            sampler,
            svc,
            source,
        } = sampled().await;
        let warming = svc.keep_metrics_warm();
        sampler.sample(&source).await;
        answer_of(&svc).await;
        sampler.sample(&source).await;
        let key = Key {
            pass: 2,
            pods: vec![pod.clone()],
            containers: vec![app.clone()],
        };
        let mut kept = false;
        for _ in 0..1000 {
            if svc.kept_metrics.get(&key, now_nanos()).is_some() {
                kept = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        warming.abort();
        assert!(kept, "the pass's answer was built without a call");
    }
}
