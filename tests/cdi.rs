//! CDI devices against a real berthd: a device from a spec file in
//! berthd's CDI dir brings a device node (the host's /dev/null under
//! another name), a mount and env into the container.

use std::collections::HashMap;

use berth_tests::host::mounts_under;
use berth_tests::pods::{container_config, pids_mentioning, Harness};
use cri_api::v1::{CdiDevice, ExecSyncRequest, NamespaceMode};

#[tokio::test(flavor = "multi_thread")]
async fn a_cdi_device_brings_its_node_mount_and_env() {
    let harness = Harness::start().await;
    let image = harness.image.clone();
    let cdi_dir = harness.berthd.sandbox.cdi_dir();
    let data = harness.berthd.sandbox.dir.path().join("cdi-data");
    std::fs::create_dir_all(&cdi_dir).expect("cdi dir");
    std::fs::create_dir_all(&data).expect("data dir");
    std::fs::write(data.join("file"), "from the host\n").expect("data file");
    let spec = format!(
        r#"cdiVersion: "0.6.0"
kind: "berth.test/dev"
containerEdits:
  env: ["CDI_SPEC=spec-level"]
devices:
  - name: "null0"
    containerEdits:
      env: ["CDI_ENV=device-level"]
      deviceNodes:
        - path: "/dev/berth-null"
          hostPath: "/dev/null"
          permissions: "rw"
      mounts:
        - hostPath: "{}"
          containerPath: "/cdi-data"
          options: ["ro", "nosuid", "nodev"]
"#,
        data.display()
    );
    std::fs::write(cdi_dir.join("berth-test.yaml"), spec).expect("spec file");

    let (pod, pod_cfg) = harness.run_pod("cdi", NamespaceMode::Container).await;

    let mut unknown = container_config("unknown", &image, &["/bin/sleep", "1000"]);
    unknown.annotations = HashMap::from([(
        "cdi.k8s.io/test".to_string(),
        "berth.test/dev=missing".to_string(),
    )]);
    let status = harness.create(&pod, &pod_cfg, unknown).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::NotFound, "{status:?}");
    assert!(
        status.message().contains("berth.test/dev=missing"),
        "{status:?}"
    );

    let mut config = container_config("app", &image, &["/bin/sleep", "1000"]);
    config.cdi_devices = vec![CdiDevice {
        name: "berth.test/dev=null0".into(),
    }];
    let app = harness.run_container(&pod, &pod_cfg, config).await;

    let script = "test -c /dev/berth-null && echo hi > /dev/berth-null && echo node ok; \
                  cat /cdi-data/file; echo \"$CDI_ENV $CDI_SPEC\"";
    let exec = harness
        .client()
        .await
        .exec_sync(ExecSyncRequest {
            container_id: app.clone(),
            cmd: vec!["/bin/sh".into(), "-c".into(), script.into()],
            timeout: 10,
        })
        .await
        .expect("ExecSync")
        .into_inner();
    assert_eq!(
        String::from_utf8_lossy(&exec.stdout),
        "node ok\nfrom the host\ndevice-level spec-level\n",
        "{exec:?}"
    );

    harness.remove_pod(&pod).await;
    let mounts = mounts_under(harness.berthd.sandbox.dir.path());
    assert!(mounts.is_empty(), "mounts left: {mounts:?}");
    let shims = pids_mentioning(&harness.berthd.sandbox.dir.path().display().to_string());
    assert!(shims.is_empty(), "shims left running: {shims:?}");
}
