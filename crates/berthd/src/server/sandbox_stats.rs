//! `PodSandboxStats`, and a pod's usage as CRI messages (the list and the
//! metrics share it): its containers' stats as `ContainerStats` makes
//! them, and the pod's own readings from the pod layer (`crate::pod`).

use std::collections::HashMap;

use cri_api::v1::{
    LinuxPodSandboxStats, NetworkInterfaceUsage, NetworkUsage, PodSandboxAttributes,
    PodSandboxStats, PodSandboxStatsRequest, PodSandboxStatsResponse, ProcessUsage, UInt64Value,
};
use tonic::Status;

use super::container_stats::{usage_messages, CgroupSample, ReadFor};
use super::CriService;
use crate::clock::now_nanos;
use crate::net_stats::{InterfaceCounters, NetCounters};
pub(super) use crate::pod::NetSample;
use crate::sandbox::store::SandboxRecord;
use crate::usage_reading::{self, PodReading};

impl CriService {
    pub(super) async fn serve_pod_sandbox_stats(
        &self,
        request: PodSandboxStatsRequest,
    ) -> Result<PodSandboxStatsResponse, Status> {
        super::require("pod_sandbox_id", &request.pod_sandbox_id)?;
        let record = self
            .context()
            .sandboxes
            .published(&request.pod_sandbox_id)?;
        Ok(PodSandboxStatsResponse {
            stats: Some(self.pod_sandbox_stats(&record).await),
        })
    }

    /// A pod's cpu, memory, process count and network, and the stats of
    /// each of its containers.
    pub(super) async fn pod_sandbox_stats(&self, record: &SandboxRecord) -> PodSandboxStats {
        self.pod_sandbox_usage(record, ReadFor::Stats).await.stats
    }

    /// [`Self::pod_sandbox_stats`], and the block IO of the pod and of each
    /// container, which CRI stats have no field for but metrics do.
    pub(super) async fn pod_sandbox_usage(
        &self,
        record: &SandboxRecord,
        read_for: ReadFor,
    ) -> PodUsage {
        // As last persisted: stats never wait for a stop or a removal.
        let context = self.context();
        let containers = context.containers.store.published_owned_by(&record.id);
        let mut container_stats = Vec::with_capacity(containers.len());
        let mut samples = HashMap::new();
        let mut container_cgroups = Vec::with_capacity(containers.len());
        for container in &containers {
            let usage = self.container_usage(container, read_for).await;
            container_cgroups.extend(usage.sample.cgroup.clone());
            // A handler's sandbox container counts in the pod's usage but
            // is not one of its containers (as in ListContainers).
            if container.is_sandbox_container() {
                continue;
            }
            container_stats.push(usage.stats);
            samples.insert(container.id.clone(), usage.sample);
        }
        // The sampler's last pass, else read now (as a container's).
        let (
            PodReading {
                cgroup: reading,
                network,
            },
            nano_cores,
        ) = match context.stats.pod(&record.id, now_nanos()) {
            Some(sample) => (sample.reading.clone(), sample.nano_cores),
            None => {
                let reading =
                    usage_reading::pod(&context.containers, record, container_cgroups).await;
                let rate = self.live_rate(&record.id, &reading.cgroup);
                (reading, rate)
            }
        };
        let usage = usage_messages(&reading, nano_cores);
        let process = reading
            .stats
            .as_ref()
            .and_then(|stats| stats.pids)
            .map(|pids| ProcessUsage {
                timestamp: reading.at,
                process_count: Some(UInt64Value {
                    value: pids.current,
                }),
            });
        // Only what the answer carries, as a container's.
        let config = &record.config;
        let stats = PodSandboxStats {
            attributes: Some(PodSandboxAttributes {
                id: record.id.clone(),
                metadata: config.metadata.clone(),
                labels: config.labels.clone(),
                annotations: config.annotations.clone(),
            }),
            linux: Some(LinuxPodSandboxStats {
                cpu: usage.cpu,
                memory: usage.memory,
                network: network
                    .as_ref()
                    .and_then(|net| network_usage(net.at, &net.counters)),
                process,
                containers: container_stats,
                io: usage.io,
            }),
            windows: None,
        };
        PodUsage {
            stats,
            sample: CgroupSample {
                at: reading.at,
                cgroup: reading.stats,
                processes: None,
                created_at: 0,
            },
            network,
            containers: samples,
        }
    }
}

/// A pod's CRI stats, and the readings they were made of, which its
/// metrics carry more of.
pub(super) struct PodUsage {
    pub stats: PodSandboxStats,
    /// The pod's cgroups, summed.
    pub sample: CgroupSample,
    /// The pod's network counters.
    pub network: Option<NetSample>,
    /// Each container's reading, by container id.
    pub containers: HashMap<String, CgroupSample>,
}

fn interface_usage(counters: &InterfaceCounters) -> NetworkInterfaceUsage {
    let value = |value| Some(UInt64Value { value });
    NetworkInterfaceUsage {
        name: counters.name.clone(),
        rx_bytes: value(counters.rx_bytes),
        rx_errors: value(counters.rx_errors),
        tx_bytes: value(counters.tx_bytes),
        tx_errors: value(counters.tx_errors),
    }
}

/// CRI network usage; the default interface is the default route's, else
/// `eth0` (the name CNI plugins give the pod's interface). None without
/// that interface (a pod whose CNI DEL has run, or with only `lo`):
/// kubelet reads the default interface of any network usage it gets
/// without a nil check (1.37's criInterfaceToSummary panics), and
/// containerd too reports no network then.
pub(super) fn network_usage(at: i64, counters: &NetCounters) -> Option<NetworkUsage> {
    let default_name = counters.default_interface.as_deref().unwrap_or("eth0");
    let default_interface = counters
        .interfaces
        .iter()
        .find(|iface| iface.name == default_name)
        .map(interface_usage)?;
    Some(NetworkUsage {
        timestamp: at,
        default_interface: Some(default_interface),
        interfaces: counters.interfaces.iter().map(interface_usage).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iface(name: &str, rx: u64) -> InterfaceCounters {
        InterfaceCounters {
            name: name.into(),
            rx_bytes: rx,
            ..Default::default()
        }
    }

    #[test]
    fn default_interface_follows_the_route_else_eth0() {
        let counters = NetCounters {
            interfaces: vec![iface("eth0", 1), iface("net1", 2)],
            default_interface: Some("net1".into()),
        };
        let usage = network_usage(3, &counters).expect("usage");
        assert_eq!(usage.default_interface.expect("default").name, "net1");
        assert_eq!(usage.interfaces.len(), 2);
        let counters = NetCounters {
            default_interface: None,
            ..counters
        };
        assert_eq!(
            network_usage(3, &counters)
                .and_then(|usage| usage.default_interface)
                .expect("eth0")
                .rx_bytes,
            Some(UInt64Value { value: 1 })
        );
    }

    #[test]
    fn no_network_usage_without_the_default_interface() {
        // A pod whose CNI DEL has run keeps only lo; one whose route names
        // an interface that is gone has none to report either.
        let only_lo = NetCounters {
            interfaces: vec![iface("lo", 1)],
            default_interface: None,
        };
        assert!(network_usage(3, &only_lo).is_none());
        let gone = NetCounters {
            interfaces: vec![iface("eth0", 1)],
            default_interface: Some("net1".into()),
        };
        assert!(network_usage(3, &gone).is_none());
    }
}
