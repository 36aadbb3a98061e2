//! Container environments against a real berthd: an env value is bytes
//! (cri-api v0.36.2), and one that is not UTF-8 reaches the container's
//! processes unchanged.

use berth_tests::host::mounts_under;
use berth_tests::pods::{container_config, pids_mentioning, with_pid, Harness};
use cri_api::v1::{ExecSyncRequest, KeyValue, NamespaceMode};

/// The `KEY=value` entries of a `/proc/<pid>/environ` dump.
fn entries(environ: &[u8]) -> Vec<&[u8]> {
    environ.split(|byte| *byte == 0).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn env_values_that_are_not_utf8_arrive_intact() {
    let harness = Harness::start().await;
    let image = harness.image.clone();
    let (pod, pod_cfg) = harness.run_pod("envs", NamespaceMode::Container).await;
    let binary: Vec<u8> = vec![b'a', 0xff, 0xfe, 0x80, b'=', 0xc3, b'z'];
    let mut config = with_pid(
        container_config("app", &image, &["/bin/sleep", "1000"]),
        NamespaceMode::Container,
        "",
    );
    config.envs.extend([
        KeyValue {
            key: "SECRET".into(),
            value: binary.clone(),
        },
        KeyValue {
            key: "TEXT".into(),
            value: "plain ü".into(),
        },
    ]);
    let app = harness.run_container(&pod, &pod_cfg, config).await;

    let mut expected_secret = b"SECRET=".to_vec();
    expected_secret.extend(&binary);
    // PID 1 is the container's init (its own PID namespace); `self` is the
    // exec'd `cat`, which inherits the container's env.
    for path in ["/proc/1/environ", "/proc/self/environ"] {
        let exec = harness
            .client()
            .await
            .exec_sync(ExecSyncRequest {
                container_id: app.clone(),
                cmd: vec!["/bin/cat".into(), path.into()],
                timeout: 10,
            })
            .await
            .unwrap_or_else(|status| panic!("ExecSync cat {path}: {status:?}"))
            .into_inner();
        assert_eq!(exec.exit_code, 0, "cat {path}: {exec:?}");
        let environ = entries(&exec.stdout);
        assert!(
            environ.contains(&expected_secret.as_slice()),
            "{path} lacks the exact bytes: {:?}",
            String::from_utf8_lossy(&exec.stdout)
        );
        assert!(
            environ.contains(&"TEXT=plain ü".as_bytes()),
            "{path}: {:?}",
            String::from_utf8_lossy(&exec.stdout)
        );
    }

    harness.remove_pod(&pod).await;
    let mounts = mounts_under(harness.berthd.sandbox.dir.path());
    assert!(mounts.is_empty(), "mounts left: {mounts:?}");
    let shims = pids_mentioning(&harness.berthd.sandbox.dir.path().display().to_string());
    assert!(shims.is_empty(), "shims left running: {shims:?}");
}
