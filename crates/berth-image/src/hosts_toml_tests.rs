use super::*;
use std::process::Command;

fn parse_text(text: &str) -> Result<Vec<HostEntry>, HostsFileError> {
    parse(
        Path::new("/certs.d/docker.io/hosts.toml"),
        Path::new("/certs.d/docker.io"),
        text,
    )
}

fn error(text: &str) -> String {
    parse_text(text).unwrap_err().to_string()
}

/// A self-signed CA and a client certificate with its key, made by openssl.
fn make_pki(dir: &Path) {
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("run openssl");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "1",
        "-subj",
        "/CN=berth test CA",
    ]);
    run(&[
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        "client.key",
        "-out",
        "client.csr",
        "-subj",
        "/CN=berth test client",
    ]);
    run(&[
        "x509",
        "-req",
        "-in",
        "client.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "client.cert",
        "-days",
        "1",
    ]);
}

#[test]
fn an_empty_file_is_the_upstream_with_every_capability() {
    let entries = parse_text("").unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].url, None);
    assert!(entries[0].is_server);
    assert_eq!(entries[0].capabilities, Capabilities::ALL);
}

#[test]
fn urls_are_read_as_containerd_reads_them() {
    let url = |text: &str, over: bool| host_url(text, over).unwrap();
    assert_eq!(url("mirror.lan", false).path, "/v2");
    assert!(!url("mirror.lan", false).plain_http);
    assert_eq!(url("https://m/prefix/", false).path, "/prefix/v2");
    assert_eq!(url("https://m/prefix/v2", false).path, "/prefix/v2");
    assert_eq!(url("https://m/a/../b/./c", false).path, "/b/c/v2");
    assert_eq!(url("https://m/api/custom", true).path, "/api/custom");
    assert_eq!(url("https://m", true).path, "");
    assert_eq!(url("http://m:5000", false).host, "m:5000");
    assert_eq!(url("https://[::1]:5000/x", false).host, "[::1]:5000");
    for bad in [
        "https://",
        "https://m?x=1",
        "https://u:p@m",
        "https://m:port",
        "ftp://m",
    ] {
        assert!(host_url(bad, false).is_err(), "{bad}");
    }
}

#[test]
fn host_tables_keep_file_order_and_their_keys() {
    let entries = parse_text(
        r#"
server = "https://registry-1.docker.io"
[host."https://z.example"]
  capabilities = ["pull", "resolve"]
  skip_verify = true
  dial_timeout = "1m30s"
  [host."https://z.example".header]
    x-custom = "1"
    x-multi = ["a", "b"]
[host."https://a.example/cache"]
  capabilities = ["PULL"]
"#,
    )
    .unwrap();
    let hosts: Vec<_> = entries
        .iter()
        .map(|e| e.url.as_ref().unwrap().host.as_str())
        .collect();
    assert_eq!(hosts, ["z.example", "a.example", "registry-1.docker.io"]);
    assert!(entries[0].tls.skip_verify);
    assert_eq!(entries[0].connect_timeout, Some(Duration::from_secs(90)));
    assert_eq!(
        entries[0].headers,
        [
            ("x-custom".to_string(), "1".to_string()),
            ("x-multi".to_string(), "a".to_string()),
            ("x-multi".to_string(), "b".to_string()),
        ]
    );
    assert!(!entries[1].capabilities.can_pull());
    assert!(entries[2].is_server && !entries[0].is_server);
}

#[test]
fn malformed_entries_name_the_file_and_key() {
    for (text, key) in [
        ("servr = \"x\"\n", "servr"),
        (
            "[host.\"https://m\"]\ncapabilites = [\"pull\"]\n",
            "capabilites",
        ),
        (
            "[host.\"https://m\"]\ncapabilities = [\"fetch\"]\n",
            "host.\"https://m\".capabilities",
        ),
        ("[host.\"https://m\"]\nca = 5\n", "host.\"https://m\".ca"),
        ("[host.\"mirror:port\"]\n", "host.\"mirror:port\""),
        ("server = \"https://u@m\"\n", "server"),
        ("[host.\"https://m\"]\nclient = [[\"a\"]]\n", "client"),
        (
            "[host.\"https://m\"]\ndial_timeout = \"5 seconds\"\n",
            "dial_timeout",
        ),
        (
            "[host.\"https://m\".header]\n\"bad header\" = \"x\"\n",
            "header",
        ),
        ("override_path = true\n", "override_path"),
        (
            "[host.\"http://m\"]\nskip_verify = true\n",
            "host.\"http://m\"",
        ),
        (
            "[host.\"https://m\"]\nca = \"missing.crt\"\n",
            "host.\"https://m\".ca",
        ),
        ("[host.\"https://m\"\n", ""),
    ] {
        let err = error(text);
        assert!(
            err.contains("/certs.d/docker.io/hosts.toml"),
            "{text}: {err}"
        );
        assert!(err.contains(key), "{text}: {err}");
    }
    // A missing file names the path it looked for, relative to the dir.
    assert!(error("ca = \"missing.crt\"\n").contains("/certs.d/docker.io/missing.crt"));
}

#[test]
fn go_durations() {
    assert_eq!(
        parse_go_duration("500ms").unwrap(),
        Duration::from_millis(500)
    );
    assert_eq!(parse_go_duration("2h").unwrap(), Duration::from_secs(7200));
    assert_eq!(
        parse_go_duration("1.5s").unwrap(),
        Duration::from_millis(1500)
    );
    assert_eq!(parse_go_duration("0").unwrap(), Duration::ZERO);
    for bad in ["", "5", "-1s", "1d", "s"] {
        assert!(parse_go_duration(bad).is_err(), "{bad}");
    }
}

#[test]
fn ca_and_client_files_are_read_in_every_form() {
    let dir = tempfile::tempdir().unwrap();
    make_pki(dir.path());
    let combined = [
        std::fs::read(dir.path().join("client.cert")).unwrap(),
        std::fs::read(dir.path().join("client.key")).unwrap(),
    ]
    .concat();
    std::fs::write(dir.path().join("client.pem"), combined).unwrap();
    let file = dir.path().join("hosts.toml");
    for client in [
        "\"client.pem\"",
        "[\"client.pem\"]",
        "[[\"client.cert\", \"client.key\"]]",
    ] {
        let text = format!("[host.\"https://m\"]\nca = [\"ca.crt\"]\nclient = {client}\n");
        let entries = parse(&file, dir.path(), &text).unwrap();
        assert_eq!(entries[0].tls.ca_pems.len(), 1, "{client}");
        assert!(entries[0].tls.client_identity.is_some(), "{client}");
    }
    // Two client certificates: berth presents one, so it says so.
    let text = "[host.\"https://m\"]\nclient = [\"client.pem\", \"client.pem\"]\n";
    let err = parse(&file, dir.path(), text).unwrap_err().to_string();
    assert!(
        err.contains("client") && err.contains("one per host"),
        "{err}"
    );
    // A certificate without its key.
    let text = "[host.\"https://m\"]\nclient = \"client.cert\"\n";
    let err = parse(&file, dir.path(), text).unwrap_err().to_string();
    assert!(err.contains("client.cert"), "{err}");
    // A CA file that is not PEM.
    let text = "[host.\"https://m\"]\nca = \"client.csr\"\n";
    let err = parse(&file, dir.path(), text).unwrap_err().to_string();
    assert!(err.contains("client.csr"), "{err}");
}

#[test]
fn a_dir_without_hosts_toml_reads_docker_cert_files() {
    let root = tempfile::tempdir().unwrap();
    let host = root.path().join("reg.lan:5000");
    std::fs::create_dir(&host).unwrap();
    make_pki(&host);
    std::fs::remove_file(host.join("ca.key")).unwrap();
    let dirs = load_dir(root.path()).unwrap();
    let entries = &dirs["reg.lan:5000"];
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].url, None);
    assert_eq!(entries[0].tls.ca_pems.len(), 1);
    assert!(entries[0].tls.client_identity.is_some());
}

#[test]
fn a_missing_config_path_is_an_error_naming_it() {
    let err = load_dir(Path::new("/nonexistent/certs.d"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("/nonexistent/certs.d"), "{err}");
}
