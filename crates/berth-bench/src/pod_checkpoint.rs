//! CheckpointPod and RestorePod as kubelet would call them (neither
//! crictl nor critest has them yet): for the guest's checkpoint check.
//! RestorePod is given the configs the checkpoint holds, as kubelet gives
//! the checkpointed pod's own.

use std::path::Path;
use std::time::Duration;

use base64::Engine;
use cri_api::v1::{CheckpointPodRequest, ContainerConfig, PodSandboxConfig, RestorePodRequest};
use prost::Message;

use crate::client::Cri;

/// The CRI asks callers of both to set a deadline.
const DEADLINE: Duration = Duration::from_secs(900);

pub async fn checkpoint(
    cri: &Cri,
    pod: &str,
    output: &Path,
    containers: &[String],
) -> Result<(), String> {
    let mut request = tonic::Request::new(CheckpointPodRequest {
        pod_sandbox_id: pod.to_string(),
        output_path: output.to_string_lossy().into_owned(),
        container_ids: containers.to_vec(),
        options: Default::default(),
    });
    request.set_timeout(DEADLINE);
    cri.runtime
        .clone()
        .checkpoint_pod(request)
        .await
        .map_err(|status| format!("CheckpointPod: {:?}: {}", status.code(), status.message()))?;
    Ok(())
}

/// Restores from `dir` and prints the new ids as JSON:
/// `{"pod_sandbox_id": ..., "containers": {"<name>": "<id>", ...}}`.
pub async fn restore(cri: &Cri, dir: &Path, log_directory: Option<&str>) -> Result<(), String> {
    let read = |name: &str| {
        std::fs::read(dir.join(name)).map_err(|err| format!("{}: {err}", dir.join(name).display()))
    };
    let mut config = PodSandboxConfig::decode(read("pod-config.pb")?.as_slice())
        .map_err(|err| format!("pod-config.pb: {err}"))?;
    if let Some(log_directory) = log_directory {
        config.log_directory = log_directory.to_string();
    }
    let manifest: serde_json::Value = serde_json::from_slice(&read("checkpoint-manifest.json")?)
        .map_err(|err| format!("checkpoint-manifest.json: {err}"))?;
    let mut container_configs = Vec::new();
    for container in manifest["containers"].as_array().into_iter().flatten() {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(container["config"].as_str().unwrap_or_default())
            .map_err(|err| format!("a container config: {err}"))?;
        container_configs.push(
            ContainerConfig::decode(bytes.as_slice())
                .map_err(|err| format!("a container config: {err}"))?,
        );
    }
    let mut request = tonic::Request::new(RestorePodRequest {
        checkpoint_path: dir.to_string_lossy().into_owned(),
        config: Some(config),
        runtime_handler: manifest["runtimeHandler"]
            .as_str()
            .unwrap_or_default()
            .into(),
        options: Default::default(),
        container_configs,
    });
    request.set_timeout(DEADLINE);
    let response = cri
        .runtime
        .clone()
        .restore_pod(request)
        .await
        .map_err(|status| format!("RestorePod: {:?}: {}", status.code(), status.message()))?
        .into_inner();
    let containers: serde_json::Map<String, serde_json::Value> = response
        .restored_containers
        .into_iter()
        .map(|c| (c.name, serde_json::Value::String(c.container_id)))
        .collect();
    println!(
        "{}",
        serde_json::json!({"pod_sandbox_id": response.pod_sandbox_id, "containers": containers})
    );
    Ok(())
}
