//! Start-up and shutdown of a real berthd: config errors, the socket, signals.

use std::os::unix::fs::{FileTypeExt, PermissionsExt};

use berth_tests::{Berthd, Sandbox};
use cri_api::v1::VersionRequest;
use nix::sys::signal::Signal;

#[test]
fn systemd_driver_without_systemd_refuses_to_start() {
    if berth_cgroups::systemd_booted() {
        eprintln!("skipped: this host runs systemd, so the systemd driver is valid here");
        return;
    }
    let sandbox = Sandbox::new();
    let stderr = sandbox.refused_start("cgroup_driver = \"systemd\"");
    assert!(stderr.contains("systemd"), "{stderr}");
    assert!(stderr.contains("not booted with systemd"), "{stderr}");
}

#[test]
fn unknown_key_is_rejected_by_name() {
    let sandbox = Sandbox::new();
    let stderr = sandbox.refused_start("cgroup_drivre = \"cgroupfs\"");
    assert!(stderr.contains("cgroup_drivre"), "{stderr}");
    let config = sandbox.config_path().display().to_string();
    assert!(stderr.contains(&config), "{stderr}");
}

#[test]
fn bad_value_lists_the_allowed_ones() {
    let sandbox = Sandbox::new();
    let stderr = sandbox.refused_start("cgroup_driver = \"cgroupv2\"");
    for allowed in ["cgroupfs", "systemd", "auto"] {
        assert!(stderr.contains(allowed), "{stderr}");
    }
}

#[test]
fn missing_explicit_config_is_an_error() {
    let sandbox = Sandbox::new();
    let missing = sandbox.dir.path().join("absent.toml");
    let output = sandbox.run_to_end(&missing, &[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("absent.toml"), "{stderr}");
}

#[test]
fn config_subcommand_prints_effective_config_with_overrides() {
    let sandbox = Sandbox::new();
    let config = sandbox.write_config("cgroup_driver = \"cgroupfs\"");
    let output = sandbox.run_to_end(&config, &["config"]);
    assert!(output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("cgroup_driver = \"cgroupfs\""), "{stdout}");
    let state = format!("state_dir = \"{}\"", sandbox.state().display());
    assert!(stdout.contains(&state), "flags override the file: {stdout}");
}

#[test]
fn repo_default_config_starts() {
    let sandbox = Sandbox::new();
    // Read at run time: a target dir shared between checkouts keeps a test
    // binary built in another one, with that checkout's path compiled in.
    let crate_dir =
        std::env::var("CARGO_MANIFEST_DIR").unwrap_or(env!("CARGO_MANIFEST_DIR").into());
    let config = std::path::Path::new(&crate_dir).join("../runtime-config.toml");
    let berthd = Berthd::start_in(sandbox, &config);
    // The socket is bound before the stores open; the start-up line that
    // names the config follows once berthd serves.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !berthd.log_text().contains("berthd serving") && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let log = berthd.log_text();
    assert!(log.contains("runtime-config.toml"), "{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn socket_has_mode_0660_and_a_second_daemon_is_refused() {
    let berthd = Berthd::start("");
    let socket = berthd.sandbox.socket();
    let meta = std::fs::metadata(&socket).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o660);

    let config = berthd.sandbox.config_path();
    let output = berthd.sandbox.run_to_end(&config, &[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("already serving"), "{stderr}");

    // The first daemon still answers on its socket.
    berthd
        .runtime_client()
        .await
        .version(VersionRequest::default())
        .await
        .expect("first berthd unaffected");
}

#[tokio::test(flavor = "multi_thread")]
async fn stale_socket_is_replaced() {
    let sandbox = Sandbox::new();
    std::fs::create_dir_all(sandbox.socket().parent().unwrap()).unwrap();
    drop(std::os::unix::net::UnixListener::bind(sandbox.socket()).unwrap());
    let config = sandbox.write_config("");
    let berthd = Berthd::start_in(sandbox, &config);
    berthd
        .runtime_client()
        .await
        .version(VersionRequest::default())
        .await
        .expect("serving on the replaced socket");
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_and_sigint_exit_zero_and_remove_the_socket() {
    for signal in [Signal::SIGTERM, Signal::SIGINT] {
        let mut berthd = Berthd::start("");
        let mut client = berthd.runtime_client().await;
        client.version(VersionRequest::default()).await.unwrap();
        let status = berthd.stop_with(signal);
        assert!(status.success(), "{signal}: {status}");
        assert!(
            !berthd.sandbox.socket().exists(),
            "{signal} left the socket"
        );
    }
}
