//! A TLS front for a [`TestRegistry`](crate::registry::TestRegistry): a
//! second Debian `docker-registry` serving the same storage read-only over
//! TLS with a certificate from a private CA made by openssl at test time,
//! requiring a client certificate from that CA, under a path prefix
//! (distribution's `http.prefix`). What a mirror behind a corporate proxy
//! looks like, for the hosts.toml tests.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use crate::registry::{free_port, spawn_docker_registry, stop_child, wait_listening, StartFailure};

/// A CA, a server certificate for 127.0.0.1 and a client certificate, in
/// a temporary directory: `ca.crt`, `server.crt`/`server.key`,
/// `client.cert`/`client.key`.
pub struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    pub fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("berth-pki-")
            .tempdir()
            .expect("temp dir");
        let run = |args: &[&str]| {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(dir.path())
                .output()
                .expect("run openssl");
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
        ];
        run(&[
            &["req", "-x509"][..],
            &ec,
            &[
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
                "-days",
                "1",
                "-subj",
                "/CN=berth test CA",
            ],
        ]
        .concat());
        std::fs::write(
            dir.path().join("server.ext"),
            "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
        )
        .expect("write server.ext");
        std::fs::write(
            dir.path().join("client.ext"),
            "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n",
        )
        .expect("write client.ext");
        for (name, cert) in [("server", "server.crt"), ("client", "client.cert")] {
            let key = format!("{name}.key");
            let csr = format!("{name}.csr");
            let ext = format!("{name}.ext");
            let subject = format!("/CN=berth test {name}");
            run(&[
                &["req"][..],
                &ec,
                &["-keyout", &key, "-out", &csr, "-subj", &subject],
            ]
            .concat());
            run(&[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                cert,
                "-days",
                "1",
                "-extfile",
                &ext,
            ]);
        }
        Self { dir }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

impl Default for Pki {
    fn default() -> Self {
        Self::new()
    }
}

/// The TLS front, stopped (by pid) when dropped.
pub struct TlsRegistry {
    dir: tempfile::TempDir,
    child: Option<Child>,
    port: u16,
}

impl TlsRegistry {
    /// Serves `storage` on a free port of 127.0.0.1 under `prefix`
    /// (`/mirror/`: the API is then at `/mirror/v2/`).
    pub fn start(storage: &Path, pki: &Pki, prefix: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("berth-tls-registry-")
            .tempdir()
            .expect("temp dir");
        let mut front = Self {
            dir,
            child: None,
            port: 0,
        };
        for _ in 0..5 {
            front.port = free_port();
            let config = format!(
                "version: 0.1\n\
                 log:\n  level: info\n  formatter: text\n  accesslog:\n    disabled: false\n\
                 storage:\n  filesystem:\n    rootdirectory: {storage}\n  \
                 maintenance:\n    uploadpurging:\n      enabled: false\n    readonly:\n      enabled: true\n\
                 http:\n  addr: 127.0.0.1:{port}\n  prefix: {prefix}\n  secret: berth-test-secret\n  \
                 tls:\n    certificate: {cert}\n    key: {key}\n    clientcas:\n      - {ca}\n\
                 health:\n  storagedriver:\n    enabled: false\n",
                storage = storage.display(),
                port = front.port,
                cert = pki.path("server.crt").display(),
                key = pki.path("server.key").display(),
                ca = pki.path("ca.crt").display(),
            );
            let config_path = front.dir.path().join("config.yml");
            std::fs::write(&config_path, config).expect("write config");
            let log = std::fs::File::create(front.log_path()).expect("log");
            let port = front.port;
            let log_path = front.log_path();
            let child = front.child.insert(spawn_docker_registry(&config_path, log));
            let waited = wait_listening(
                child,
                port,
                || std::fs::read_to_string(&log_path).unwrap_or_default(),
                || TcpStream::connect(("127.0.0.1", port)).is_ok(),
            );
            match waited {
                Ok(()) => return front,
                Err(StartFailure::Exited(log)) if log.contains("address already in use") => {
                    front.child = None;
                    continue;
                }
                Err(StartFailure::Exited(log)) => panic!("TLS docker-registry exited: {log}"),
                Err(StartFailure::TimedOut(log)) => {
                    panic!("TLS docker-registry not listening in time: {log}")
                }
            }
        }
        panic!("TLS docker-registry found no free port in 5 tries");
    }

    /// `127.0.0.1:PORT`.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("registry.log")
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Access-log lines of GETs whose path starts with `path_prefix`.
    pub fn gets_under(&self, path_prefix: &str) -> usize {
        let needle = format!("\"GET {path_prefix}");
        self.log_text()
            .lines()
            .filter(|line| line.contains(&needle))
            .count()
    }
}

impl Drop for TlsRegistry {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            stop_child(&mut child);
        }
    }
}
