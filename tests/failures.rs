//! Failures an operator can diagnose: a container that cannot be created
//! fails with FailedPrecondition and the runtime's reason (the error lines
//! of the shim's log), and that log is kept with the pod sandbox until the
//! sandbox is removed.

use std::path::PathBuf;

use berth_tests::pods::{container_config, Harness};
use cri_api::v1::{Mount, NamespaceMode};

#[tokio::test(flavor = "multi_thread")]
async fn a_container_that_cannot_be_created_says_why() {
    let harness = Harness::start().await;
    let image = harness.image.clone();
    let (pod, pod_cfg) = harness.run_pod("broken", NamespaceMode::Container).await;

    // A file mounted over a directory of the image: libcontainer fails while
    // preparing the rootfs, after the shim has started.
    let file = harness.berthd.sandbox.dir.path().join("a-file");
    std::fs::write(&file, "x").expect("host file");
    let mut config = container_config("broken", &image, &["/bin/true"]);
    config.mounts.push(Mount {
        container_path: "/bin".into(),
        host_path: file.display().to_string(),
        ..Default::default()
    });
    let err = harness
        .create(&pod, &pod_cfg, config)
        .await
        .expect_err("a file over /bin cannot be mounted");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    let message = err.message();

    // The whole shim log is kept, named in the message.
    let kept = message
        .rsplit_once("; full log in ")
        .map(|(_, path)| PathBuf::from(path))
        .unwrap_or_else(|| panic!("no kept log named: {message}"));
    let text = std::fs::read_to_string(&kept)
        .unwrap_or_else(|err| panic!("kept log {}: {err}", kept.display()));
    assert!(text.contains("ERROR"), "{text}");

    // The message has libcontainer's cause, not only its summary.
    assert!(message.contains("; shim log: "), "{message}");
    assert!(
        message.contains("failed to mount") && message.contains("EINVAL"),
        "{message}\n\nshim log:\n{text}\n\ncontainer log:\n{}",
        std::fs::read_to_string(harness.log_dir("broken").join("broken.log")).unwrap_or_default()
    );

    // berthd's own log names the failure and its reason at the default level.
    let log = harness.berthd.log_text();
    assert!(
        log.contains("RuntimeService/CreateContainer") && log.contains("FailedPrecondition"),
        "{log}"
    );
    assert!(log.contains("shim log"), "{log}");

    harness.remove_pod(&pod).await;
    assert!(!kept.exists(), "{} outlived its sandbox", kept.display());
}
