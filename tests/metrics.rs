//! berthd's Prometheus endpoint, scraped over HTTP while a real pod runs:
//! what an operator alerts on (CNI calls and their outcome, OOM kills, the
//! daemon's own CPU, descriptors and threads) must be there and count.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use berth_tests::host::log_tail;
use berth_tests::node::Node;
use berth_tests::pods::{container_config, Harness};
use cri_api::v1::{ContainerState, LinuxContainerConfig, LinuxContainerResources, NamespaceMode};

/// A loopback port nothing listens on now.
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local address").port()
}

fn scrape(port: u16) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to /metrics");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .expect("send the request");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .expect("read the response");
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    response
}

/// The value of the sample `series` (name and labels exactly), if present.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let value = line.strip_prefix(series)?.strip_prefix(' ')?;
        value.split_whitespace().next()?.parse().ok()
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn the_endpoint_counts_cni_calls_oom_kills_and_the_daemons_own_use() {
    let port = free_port();
    let node = Node::start_with(
        &format!("[metrics]\nenabled = true\naddress = \"127.0.0.1:{port}\"\n"),
        &[],
    );
    let harness = Harness::start_on(node).await;

    let text = scrape(port);
    for series in [
        "berth_process_cpu_seconds_total",
        "berth_process_open_fds",
        "berth_process_max_fds",
        "berth_process_threads",
    ] {
        let value = sample(&text, series).unwrap_or_else(|| panic!("{series} in {text}"));
        assert!(value > 0.0, "{series} is {value}");
    }
    assert_eq!(
        sample(&text, "berth_image_pulls_in_progress"),
        Some(0.0),
        "{text}"
    );

    // The container holds 200 MB in a shell variable, past its 32 MiB.
    let (pod, pod_config) = harness.run_pod("oom", NamespaceMode::Container).await;
    let mut config = container_config(
        "hog",
        &harness.image,
        &[
            "/bin/sh",
            "-c",
            "x=$(busybox yes | busybox head -c 200000000); sleep 3600",
        ],
    );
    config.linux = Some(LinuxContainerConfig {
        resources: Some(LinuxContainerResources {
            memory_limit_in_bytes: 32 << 20,
            ..Default::default()
        }),
        ..Default::default()
    });
    let hog = harness.create_ok(&pod, &pod_config, config).await;
    harness.start_container(&hog).await;
    let status = harness
        .wait_state(&hog, ContainerState::ContainerExited)
        .await;
    assert_eq!(status.reason, "OOMKilled", "{status:?}");

    // The STOPPED event that counts it comes from the exit watcher.
    let deadline = Instant::now() + Duration::from_secs(10);
    let text = loop {
        let text = scrape(port);
        if sample(&text, "berth_container_oom_kills_total") == Some(1.0)
            || Instant::now() > deadline
        {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        sample(&text, "berth_container_oom_kills_total"),
        Some(1.0),
        "{text}\nberthd log:\n{}",
        log_tail(&harness.berthd)
    );
    assert_eq!(
        sample(
            &text,
            r#"berth_cni_duration_seconds_count{operation="ADD",result="success"}"#
        ),
        Some(1.0),
        "{text}"
    );

    harness.remove_pod(&pod).await;
    let text = scrape(port);
    assert_eq!(
        sample(
            &text,
            r#"berth_cni_duration_seconds_count{operation="DEL",result="success"}"#
        ),
        Some(1.0),
        "{text}"
    );
}
