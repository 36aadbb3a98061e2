//! `ListPodSandboxMetricsResponse`, written by hand instead of generated:
//! at 250 pods the answer is about 2 MB of labelled metrics, and a server
//! that keeps it already encoded between two samples must be able to send
//! those bytes as they are. On the wire it is the generated message's
//! (`repeated PodSandboxMetrics pod_metrics = 1;`); a test holds the two
//! encodings equal.

use prost::bytes::{Buf, BufMut, Bytes};
use prost::encoding::{message, skip_field, DecodeContext, WireType};
use prost::DecodeError;

use crate::v1::PodSandboxMetrics;

#[derive(Clone, PartialEq, Default, Debug)]
pub struct ListPodSandboxMetricsResponse {
    /// Metrics for each pod sandbox, as decoded (a client's answer) or to
    /// be encoded.
    pub pod_metrics: Vec<PodSandboxMetrics>,
    /// More `pod_metrics` entries, already encoded as field 1 of this
    /// message: sent after `pod_metrics`, as they are. Never set by
    /// decoding.
    pub encoded: Bytes,
}

impl prost::Message for ListPodSandboxMetricsResponse {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        message::encode_repeated(1, &self.pod_metrics, buf);
        buf.put_slice(&self.encoded);
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        match tag {
            1 => message::merge_repeated(wire_type, &mut self.pod_metrics, buf, ctx).map_err(
                |mut error| {
                    error.push("ListPodSandboxMetricsResponse", "pod_metrics");
                    error
                },
            ),
            _ => skip_field(wire_type, tag, buf, ctx),
        }
    }

    fn encoded_len(&self) -> usize {
        message::encoded_len_repeated(1, &self.pod_metrics) + self.encoded.len()
    }

    fn clear(&mut self) {
        self.pod_metrics.clear();
        self.encoded = Bytes::new();
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;
    use crate::v1::{ContainerMetrics, Metric, UInt64Value};

    /// The message as `proto/api.proto` defines it, as prost generates it.
    #[derive(Clone, PartialEq, prost::Message)]
    struct Generated {
        #[prost(message, repeated, tag = "1")]
        pod_metrics: Vec<PodSandboxMetrics>,
    }

    fn pod(id: &str) -> PodSandboxMetrics {
        PodSandboxMetrics {
            pod_sandbox_id: id.into(),
            metrics: vec![Metric {
                name: "container_memory_rss".into(),
                timestamp: 1_800_000_000_000_000_000,
                metric_type: 1,
                label_values: vec![id.into(), "web".into(), String::new()],
                value: Some(UInt64Value { value: 4096 }),
            }],
            container_metrics: vec![ContainerMetrics {
                container_id: format!("{id}-app"),
                metrics: Vec::new(),
            }],
        }
    }

    #[test]
    fn it_encodes_and_decodes_as_the_generated_message() {
        let pods = vec![pod("a"), pod("b")];
        let ours = ListPodSandboxMetricsResponse {
            pod_metrics: pods.clone(),
            encoded: Bytes::new(),
        };
        let generated = Generated {
            pod_metrics: pods.clone(),
        };
        let bytes = generated.encode_to_vec();
        assert_eq!(ours.encode_to_vec(), bytes);
        assert_eq!(ours.encoded_len(), bytes.len());
        let decoded = ListPodSandboxMetricsResponse::decode(bytes.as_slice()).unwrap();
        assert_eq!(decoded, ours);
    }

    #[test]
    fn kept_bytes_are_sent_as_more_pods() {
        let kept = Generated {
            pod_metrics: vec![pod("b"), pod("c")],
        }
        .encode_to_vec();
        let answer = ListPodSandboxMetricsResponse {
            pod_metrics: vec![pod("a")],
            encoded: Bytes::from(kept),
        };
        let bytes = answer.encode_to_vec();
        assert_eq!(answer.encoded_len(), bytes.len());
        let decoded = Generated::decode(bytes.as_slice()).unwrap();
        assert_eq!(decoded.pod_metrics, vec![pod("a"), pod("b"), pod("c")]);
    }
}
