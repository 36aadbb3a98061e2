//! The CNI client against fake plugins: shell scripts that record their
//! environment and stdin and print canned output.

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tempfile::TempDir;

use super::*;

/// A bin directory of fake plugins and a directory of their recordings.
struct Fakes {
    bin: TempDir,
    rec: TempDir,
}

impl Fakes {
    fn new() -> Self {
        Fakes {
            bin: tempfile::tempdir().unwrap(),
            rec: tempfile::tempdir().unwrap(),
        }
    }

    /// Installs a fake plugin called `name`. Per command it prints
    /// `<rec>/<name>.<CMD>.out` and `.err` if present and exits with the
    /// number in `.rc` (default 0).
    fn plugin(&self, name: &str) {
        let rec = self.rec.path().display();
        let script = format!(
            r#"#!/bin/sh
me=$(basename "$0")
d='{rec}'
cat > "$d/$me.$CNI_COMMAND.stdin"
env > "$d/$me.$CNI_COMMAND.env"
echo "$CNI_COMMAND $me" >> "$d/calls"
[ -f "$d/$me.$CNI_COMMAND.pre" ] && . "$d/$me.$CNI_COMMAND.pre"
[ -f "$d/$me.$CNI_COMMAND.out" ] && cat "$d/$me.$CNI_COMMAND.out"
[ -f "$d/$me.$CNI_COMMAND.err" ] && cat "$d/$me.$CNI_COMMAND.err" >&2
exit $(cat "$d/$me.$CNI_COMMAND.rc" 2>/dev/null || echo 0)
"#
        );
        let path = self.bin.path().join(name);
        fs::write(&path, script).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn respond(&self, name: &str, command: &str, out: &str, rc: i32) {
        let base = self.rec.path().join(format!("{name}.{command}"));
        fs::write(base.with_extension(format!("{command}.out")), out).unwrap();
        fs::write(base.with_extension(format!("{command}.rc")), rc.to_string()).unwrap();
    }

    fn file(&self, name: &str, command: &str, ext: &str) -> PathBuf {
        self.rec.path().join(format!("{name}.{command}.{ext}"))
    }

    fn calls(&self) -> Vec<String> {
        fs::read_to_string(self.rec.path().join("calls"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn stdin(&self, name: &str, command: &str) -> Value {
        serde_json::from_slice(&fs::read(self.file(name, command, "stdin")).unwrap()).unwrap()
    }

    fn env(&self, name: &str, command: &str) -> HashMap<String, String> {
        fs::read_to_string(self.file(name, command, "env"))
            .unwrap()
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn cni(&self) -> CniConfig {
        CniConfig::new(self.rec.path(), vec![self.bin.path().to_path_buf()])
    }

    fn pod(&self) -> PodNetwork {
        PodNetwork {
            sandbox_id: "sandbox-1".into(),
            // A real namespace path (DEL checks it is one); fakes never enter it.
            netns: PathBuf::from("/proc/self/ns/net"),
            ifname: "eth0".into(),
            pod_namespace: "ns1".into(),
            pod_name: "pod1".into(),
            pod_uid: "uid1".into(),
            port_mappings: vec![PortMapping {
                host_port: 8080,
                container_port: 80,
                protocol: "tcp".into(),
                host_ip: String::new(),
            }],
            pod_cidr: None,
        }
    }
}

fn list(json: &str) -> NetworkConfigList {
    NetworkConfigList::from_slice(json.as_bytes(), Path::new("test.conflist")).unwrap()
}

const RESULT_A: &str = r#"{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/ns"}],
    "ips":[{"address":"10.9.0.2/24","interface":0},{"address":"fd09::2/64","interface":0}]}"#;
const RESULT_B: &str = r#"{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/ns"}],
    "ips":[{"address":"10.9.0.2/24","interface":0},{"address":"fd09::2/64","interface":0}],"dns":{}}"#;

#[tokio::test]
async fn add_sets_env_and_injects_stdin() {
    let f = Fakes::new();
    f.plugin("fake-a");
    f.plugin("fake-b");
    f.respond("fake-a", "ADD", RESULT_A, 0);
    f.respond("fake-b", "ADD", RESULT_B, 0);
    let net = list(
        r#"{"cniVersion":"1.0.0","name":"testnet","plugins":[
            {"type":"fake-a","cniVersion":"0.3.1","color":"red"},
            {"type":"fake-b","capabilities":{"portMappings":true,"bandwidth":true}}]}"#,
    );
    let pod = f.pod();

    let added = f.cni().add(&net, &pod).await.unwrap();

    assert_eq!(f.calls(), ["ADD fake-a", "ADD fake-b"]);
    assert_eq!(added.raw, serde_json::from_str::<Value>(RESULT_B).unwrap());
    let ips: Vec<String> = added.ips.iter().map(ToString::to_string).collect();
    assert_eq!(ips, ["10.9.0.2", "fd09::2"]);

    let env = f.env("fake-a", "ADD");
    assert_eq!(env["CNI_COMMAND"], "ADD");
    assert_eq!(env["CNI_CONTAINERID"], "sandbox-1");
    assert_eq!(env["CNI_NETNS"], pod.netns.display().to_string());
    assert_eq!(env["CNI_IFNAME"], "eth0");
    assert_eq!(
        env["CNI_ARGS"],
        "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns1;K8S_POD_NAME=pod1;\
         K8S_POD_INFRA_CONTAINER_ID=sandbox-1;K8S_POD_UID=uid1"
    );
    assert_eq!(env["CNI_PATH"], f.bin.path().display().to_string());
    // The rest of the environment is inherited.
    assert_eq!(env.get("PATH"), std::env::var("PATH").ok().as_ref());

    let a = f.stdin("fake-a", "ADD");
    assert_eq!(a["name"], "testnet");
    assert_eq!(a["cniVersion"], "1.0.0");
    assert_eq!(a["color"], "red");
    assert!(a.get("prevResult").is_none());
    assert!(a.get("runtimeConfig").is_none(), "no capabilities declared");

    let b = f.stdin("fake-b", "ADD");
    assert_eq!(b["name"], "testnet");
    assert_eq!(
        b["prevResult"],
        serde_json::from_str::<Value>(RESULT_A).unwrap()
    );
    assert_eq!(
        b["runtimeConfig"],
        json!({"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]})
    );
}

#[tokio::test]
async fn add_parses_a_0_4_0_result() {
    let f = Fakes::new();
    f.plugin("old");
    f.respond(
        "old",
        "ADD",
        r#"{"cniVersion":"0.4.0","ips":[{"version":"4","address":"172.16.3.4/16","gateway":"172.16.0.1"}]}"#,
        0,
    );
    let net = list(r#"{"cniVersion":"0.4.0","name":"n","plugins":[{"type":"old"}]}"#);
    let added = f.cni().add(&net, &f.pod()).await.unwrap();
    assert_eq!(
        added.ips,
        ["172.16.3.4".parse::<std::net::IpAddr>().unwrap()]
    );
    assert_eq!(f.stdin("old", "ADD")["cniVersion"], "0.4.0");
}

#[tokio::test]
async fn failed_add_reports_the_cni_error_and_deletes_the_whole_list() {
    let f = Fakes::new();
    for p in ["first", "second", "third"] {
        f.plugin(p);
    }
    f.respond("first", "ADD", RESULT_A, 0);
    f.respond(
        "second",
        "ADD",
        r#"{"cniVersion":"1.0.0","code":11,"msg":"no IP addresses available","details":"range 10.9.0.0/24 full"}"#,
        1,
    );
    fs::write(f.file("second", "ADD", "err"), "allocator log line\n").unwrap();
    let net = list(
        r#"{"cniVersion":"1.0.0","name":"n","plugins":[
            {"type":"first"},{"type":"second"},{"type":"third"}]}"#,
    );

    let err = f.cni().add(&net, &f.pod()).await.unwrap_err();

    let CniError::PluginFailed {
        ref plugin,
        command,
        ref failure,
    } = err
    else {
        panic!("unexpected error {err:?}");
    };
    assert_eq!(plugin, "second");
    assert_eq!(command, CniCommand::Add);
    assert_eq!(failure.code, Some(11));
    assert_eq!(failure.msg, "no IP addresses available");
    assert_eq!(failure.details, "range 10.9.0.0/24 full");
    assert_eq!(failure.stderr, "allocator log line");
    let message = err.to_string();
    assert!(message.contains("second ADD failed"), "{message}");
    assert!(message.contains("no IP addresses available"), "{message}");

    assert_eq!(
        f.calls(),
        [
            "ADD first",
            "ADD second",
            "DEL third",
            "DEL second",
            "DEL first"
        ]
    );
    for p in ["first", "second", "third"] {
        let stdin = f.stdin(p, "DEL");
        assert!(stdin.get("prevResult").is_none(), "{p}: {stdin}");
        assert_eq!(f.env(p, "DEL")["CNI_COMMAND"], "DEL");
    }
}

#[tokio::test]
async fn add_error_survives_a_failing_cleanup() {
    let f = Fakes::new();
    f.plugin("only");
    f.respond("only", "ADD", "", 3);
    fs::write(f.file("only", "ADD", "err"), "boom").unwrap();
    f.respond("only", "DEL", r#"{"code":7,"msg":"del broke too"}"#, 1);
    let net = list(r#"{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"only"}]}"#);
    let err = f.cni().add(&net, &f.pod()).await.unwrap_err().to_string();
    assert_eq!(err, "CNI plugin only ADD failed: exit status 3: boom");
    assert_eq!(f.calls(), ["ADD only", "DEL only"]);
}

#[tokio::test]
async fn add_rejects_a_result_that_is_not_json_and_cleans_up() {
    let f = Fakes::new();
    f.plugin("garbage");
    f.respond("garbage", "ADD", "hello", 0);
    let net = list(r#"{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"garbage"}]}"#);
    let err = f.cni().add(&net, &f.pod()).await.unwrap_err();
    assert!(matches!(err, CniError::InvalidResult { .. }), "{err:?}");
    assert_eq!(f.calls(), ["ADD garbage", "DEL garbage"]);
}

#[tokio::test]
async fn missing_plugin_is_named() {
    let f = Fakes::new();
    f.plugin("present");
    f.respond("present", "ADD", RESULT_A, 0);
    let net = list(
        r#"{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"present"},{"type":"absent"}]}"#,
    );
    let err = f.cni().add(&net, &f.pod()).await.unwrap_err();
    assert!(
        matches!(&err, CniError::PluginNotFound { plugin, .. } if plugin == "absent"),
        "{err:?}"
    );
    // Cleanup still reaches the plugins that exist.
    assert_eq!(f.calls(), ["ADD present", "DEL present"]);
}

#[tokio::test]
async fn del_without_add_result_skips_a_plugin_that_is_not_installed() {
    let f = Fakes::new();
    f.plugin("present");
    let net = list(
        r#"{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"present"},{"type":"absent"}]}"#,
    );
    // ADD never answered (it failed at `absent`): DEL completes.
    f.cni().del(&net, &f.pod(), None).await.unwrap();
    assert_eq!(f.calls(), ["DEL present"]);
}

#[tokio::test]
async fn del_after_a_complete_add_fails_on_a_plugin_removed_since() {
    let f = Fakes::new();
    f.plugin("present");
    let net = list(
        r#"{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"present"},{"type":"absent"}]}"#,
    );
    let prev: Value = serde_json::from_str(RESULT_A).unwrap();
    let err = f.cni().del(&net, &f.pod(), Some(&prev)).await.unwrap_err();
    assert!(
        matches!(&err, CniError::PluginNotFound { plugin, .. } if plugin == "absent"),
        "{err:?}"
    );
    // The plugins that exist are still released.
    assert_eq!(f.calls(), ["DEL present"]);
}

#[tokio::test]
async fn del_runs_in_reverse_with_prev_result() {
    let f = Fakes::new();
    f.plugin("a");
    f.plugin("b");
    let net = list(
        r#"{"cniVersion":"1.0.0","name":"n","plugins":[
            {"type":"a"},{"type":"b","capabilities":{"portMappings":true}}]}"#,
    );
    let prev: Value = serde_json::from_str(RESULT_B).unwrap();
    let pod = f.pod();

    f.cni().del(&net, &pod, Some(&prev)).await.unwrap();

    assert_eq!(f.calls(), ["DEL b", "DEL a"]);
    assert_eq!(f.stdin("a", "DEL")["prevResult"], prev);
    assert_eq!(f.stdin("b", "DEL")["prevResult"], prev);
    assert_eq!(
        f.stdin("b", "DEL")["runtimeConfig"]["portMappings"][0]["hostPort"],
        8080
    );
    assert_eq!(
        f.env("a", "DEL")["CNI_NETNS"],
        pod.netns.display().to_string()
    );
}

#[tokio::test]
async fn del_passes_empty_netns_when_the_namespace_is_gone() {
    let f = Fakes::new();
    f.plugin("a");
    let net = list(r#"{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"a"}]}"#);
    let unmounted_pin = f.rec.path().join("pinned-net");
    fs::write(&unmounted_pin, "").unwrap();
    for netns in [f.rec.path().join("no-such-netns"), unmounted_pin] {
        let pod = PodNetwork {
            netns: netns.clone(),
            ..f.pod()
        };
        f.cni().del(&net, &pod, None).await.unwrap();
        let env = f.env("a", "DEL");
        assert_eq!(env["CNI_NETNS"], "", "{}", netns.display());
        assert_eq!(env["CNI_CONTAINERID"], "sandbox-1");
        assert!(f.stdin("a", "DEL").get("prevResult").is_none());
    }
}

#[tokio::test]
async fn del_runs_every_plugin_and_returns_the_first_error() {
    let f = Fakes::new();
    for p in ["a", "b", "c"] {
        f.plugin(p);
    }
    f.respond("c", "DEL", r#"{"code":100,"msg":"c failed"}"#, 1);
    f.respond("b", "DEL", r#"{"code":101,"msg":"b failed"}"#, 1);
    let net = list(
        r#"{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"a"},{"type":"b"},{"type":"c"}]}"#,
    );
    let err = f
        .cni()
        .del(&net, &f.pod(), None)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("c failed"), "{err}");
    assert_eq!(f.calls(), ["DEL c", "DEL b", "DEL a"]);
}

#[tokio::test]
async fn plugin_is_killed_on_timeout() {
    let f = Fakes::new();
    f.plugin("slow");
    // The plugin and a grandchild both sleep; the whole group must die.
    let pids = f.rec.path().join("pids");
    fs::write(
        f.file("slow", "ADD", "pre"),
        format!("sleep 30 & echo $$ $! > '{}'; wait\n", pids.display()),
    )
    .unwrap();
    let net = list(r#"{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"slow"}]}"#);
    let started = Instant::now();
    let err = add_network(
        &[f.bin.path().to_path_buf()],
        Duration::from_millis(500),
        &net,
        &f.pod(),
    )
    .await
    .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert!(
        matches!(err, CniError::Timeout { ref plugin, command: CniCommand::Add, .. } if plugin == "slow"),
        "{err:?}"
    );
    assert!(err.to_string().contains("timed out"), "{err}");
    assert_eq!(f.calls(), ["ADD slow", "DEL slow"]);

    let pids = fs::read_to_string(&pids).unwrap();
    for pid in pids.split_whitespace() {
        let stat = Path::new("/proc").join(pid).join("stat");
        let deadline = Instant::now() + Duration::from_secs(5);
        // Gone, or a zombie waiting for whoever reaps orphans.
        while fs::read_to_string(&stat).is_ok_and(|s| !s.contains(") Z ")) {
            assert!(
                Instant::now() < deadline,
                "process {pid} survived the timeout"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[tokio::test]
async fn loopback_up_runs_the_loopback_plugin_on_lo() {
    let f = Fakes::new();
    f.plugin("loopback");
    f.respond("loopback", "ADD", r#"{"cniVersion":"1.0.0"}"#, 0);
    let netns = f.rec.path().to_path_buf();
    f.cni().loopback_up(&netns).await.unwrap();
    let env = f.env("loopback", "ADD");
    assert_eq!(env["CNI_IFNAME"], "lo");
    assert_eq!(env["CNI_NETNS"], netns.display().to_string());
    assert!(!env["CNI_CONTAINERID"].is_empty());
    let stdin = f.stdin("loopback", "ADD");
    assert_eq!(stdin["type"], "loopback");
    assert_eq!(stdin["cniVersion"], "1.0.0");
    assert_eq!(stdin["name"], "cni-loopback");
}

#[tokio::test]
async fn single_conf_from_a_directory_runs_as_a_list() {
    let f = Fakes::new();
    f.plugin("solo");
    f.respond("solo", "ADD", RESULT_A, 0);
    let conf_dir = tempfile::tempdir().unwrap();
    fs::write(
        conf_dir.path().join("50-solo.conf"),
        r#"{"cniVersion":"1.0.0","name":"solonet","type":"solo","mtu":1400}"#,
    )
    .unwrap();
    fs::write(
        conf_dir.path().join("60-later.conflist"),
        r#"{"cniVersion":"1.0.0","name":"later","plugins":[{"type":"absent"}]}"#,
    )
    .unwrap();
    let cni = CniConfig::new(conf_dir.path(), vec![f.bin.path().to_path_buf()]);
    let net = cni.load_network().unwrap().unwrap();
    assert_eq!(net.name, "solonet");

    cni.add(&net, &f.pod()).await.unwrap();
    let stdin = f.stdin("solo", "ADD");
    assert_eq!(stdin["name"], "solonet");
    assert_eq!(stdin["mtu"], 1400);
}
