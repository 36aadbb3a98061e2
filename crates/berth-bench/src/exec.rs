//! What kubelet's exec probes cost: ExecSync of a probe-sized command in
//! running containers, one at a time and several at once, as a node's
//! probes fire. A probe's default timeout is 1 s, so an exec that takes a
//! second fails the probe however healthy the container is.

use std::time::{Duration, Instant};

use cri_api::v1::ExecSyncRequest;
use tonic::{Code, Request};

use crate::client::Cri;
use crate::record::{ms, Out};
use crate::stats::running;

/// The command: what a liveness probe of the suite's kind runs (`cat` of a
/// file the container holds).
const COMMAND: [&str; 2] = ["cat", "/etc/hostname"];
/// The exec's own timeout, in seconds: kubelet's default probe timeout.
const EXEC_TIMEOUT_SECONDS: i64 = 1;
/// The client's bound on one call: past the runtime's own timeout, so the
/// runtime's answer to it is what is measured.
const RPC_TIMEOUT: Duration = Duration::from_secs(10);

/// `n` rounds of ExecSync in `at_once` of the running containers labelled
/// `tag` at once (one exec per container a round). Latencies go to
/// `<metric>/ExecSync, <at_once> at once`; execs that failed (an error, a
/// timeout, a non-zero exit) are counted in `<metric>/failed, <at_once> at
/// once`.
pub async fn exec(
    cri: &Cri,
    out: &Out,
    tag: &str,
    n: usize,
    at_once: usize,
    metric: &str,
) -> Result<(), String> {
    let containers = running(cri, tag).await?;
    if containers.len() < at_once {
        return Err(format!(
            "{at_once} execs at once need as many running containers labelled {tag}; found {}",
            containers.len()
        ));
    }
    let targets = &containers[..at_once];
    let mut samples = Vec::with_capacity(n * at_once);
    let mut failed = 0usize;
    for _ in 0..n {
        // Spawned at once, awaited in order.
        let calls: Vec<_> = targets
            .iter()
            .map(|id| {
                let mut rt = cri.runtime.clone();
                let mut request = Request::new(ExecSyncRequest {
                    container_id: id.clone(),
                    cmd: COMMAND.iter().map(|s| s.to_string()).collect(),
                    timeout: EXEC_TIMEOUT_SECONDS,
                });
                request.set_timeout(RPC_TIMEOUT);
                tokio::spawn(async move {
                    let t = Instant::now();
                    let result = rt.exec_sync(request).await;
                    (ms(t.elapsed()), result)
                })
            })
            .collect();
        for call in calls {
            let (took, result) = call.await.map_err(|err| err.to_string())?;
            samples.push(took);
            match result {
                Ok(response) if response.get_ref().exit_code == 0 => {}
                Ok(response) => {
                    failed += 1;
                    eprintln!(
                        "berth-bench: ExecSync exited {}: {}",
                        response.get_ref().exit_code,
                        String::from_utf8_lossy(&response.get_ref().stderr).trim()
                    );
                }
                Err(s) if matches!(s.code(), Code::DeadlineExceeded | Code::Unknown) => {
                    failed += 1;
                    eprintln!("berth-bench: ExecSync: {}", s.message());
                }
                Err(s) => return Err(format!("ExecSync: {s}")),
            }
        }
    }
    out.write(
        &format!("{metric}/ExecSync, {at_once} at once"),
        "ms",
        &samples,
    )?;
    out.write(
        &format!("{metric}/failed, {at_once} at once"),
        "count",
        &[failed as f64],
    )
}
