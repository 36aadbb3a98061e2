//! Shared support for the integration tests: start a real berthd on a
//! temporary socket with its own state directories, and connect CRI clients
//! to it.

#![forbid(unsafe_code)]

pub mod bad_registry;
pub mod cri_fuzz;
pub mod host;
pub mod node;
pub mod pods;
pub mod registry;
pub mod tls_registry;

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use cri_api::v1::image_service_client::ImageServiceClient;
use cri_api::v1::runtime_service_client::RuntimeServiceClient;
use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};

/// How long a berthd may take to create its socket.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// The berthd binary built with this test (same profile and target dir).
pub fn berthd_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test> → target/<profile>/berthd
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test executable lives in target/<profile>/deps");
    let binary = profile_dir.join("berthd");
    assert!(
        binary.exists(),
        "{} is missing: build it first (`cargo build --workspace`)",
        binary.display()
    );
    binary
}

/// A berthd's private directories: config, socket, root, state, CNI configs.
pub struct Sandbox {
    pub dir: tempfile::TempDir,
}

impl Sandbox {
    pub fn new() -> Self {
        Self {
            dir: tempfile::Builder::new()
                .prefix("berth-test-")
                .tempdir()
                .expect("temp dir"),
        }
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("run/berth.sock")
    }
    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }
    pub fn state(&self) -> PathBuf {
        self.dir.path().join("run")
    }
    pub fn cni_conf_dir(&self) -> PathBuf {
        self.dir.path().join("net.d")
    }
    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("runtime-config.toml")
    }

    /// CDI spec files of this berthd: never the host's.
    pub fn cdi_dir(&self) -> PathBuf {
        self.dir.path().join("cdi")
    }

    /// Writes a config file: `extra` is appended to the CNI dir setting
    /// (and the CDI spec dir).
    pub fn write_config(&self, extra: &str) -> PathBuf {
        // Stats sampled every second, not every 10 s: a test reads what it
        // just did (a fill, a busy loop) within its own bounds.
        let text = format!(
            "stats_collection_period = 1\n{extra}\n[cni]\nconf_dir = \"{}\"\n[cdi]\nspec_dirs = [\"{}\"]\n",
            self.cni_conf_dir().display(),
            self.cdi_dir().display()
        );
        std::fs::write(self.config_path(), text).expect("write config");
        self.config_path()
    }

    /// A berthd command on this sandbox's paths.
    pub fn command(&self, config: &Path) -> Command {
        let mut command = Command::new(berthd_binary());
        command
            .arg("--config")
            .arg(config)
            .arg("--listen")
            .arg(self.socket())
            .arg("--root")
            .arg(self.root())
            .arg("--state")
            .arg(self.state())
            .env_remove("RUST_LOG");
        command
    }

    /// Runs berthd to completion (for start-up failures and `berthd config`).
    pub fn run_to_end(&self, config: &Path, args: &[&str]) -> Output {
        let mut child = self
            .command(config)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn berthd");
        let deadline = Instant::now() + START_TIMEOUT;
        while child.try_wait().expect("wait").is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("berthd {args:?} did not exit");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        child.wait_with_output().expect("berthd output")
    }

    /// Writes a config of `extra` (as [`Sandbox::write_config`]) and runs
    /// berthd on it, which must refuse to start and make no socket: its
    /// stderr.
    pub fn refused_start(&self, extra: &str) -> String {
        let config = self.write_config(extra);
        let output = self.run_to_end(&config, &[]);
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(!output.status.success(), "berthd started: {stderr}");
        assert!(!self.socket().exists(), "no socket when start-up fails");
        stderr
    }
}

impl Default for Sandbox {
    fn default() -> Self {
        Self::new()
    }
}

/// A running berthd, stopped with SIGTERM when dropped.
pub struct Berthd {
    pub sandbox: Sandbox,
    child: Option<Child>,
    log: PathBuf,
}

impl Berthd {
    /// Starts berthd with the given config text and waits for its socket.
    pub fn start(config: &str) -> Self {
        let sandbox = Sandbox::new();
        let config = sandbox.write_config(config);
        Self::start_in(sandbox, &config)
    }

    pub fn start_in(sandbox: Sandbox, config: &Path) -> Self {
        let log = sandbox.dir.path().join("berthd.log");
        // Appended, not truncated: a restart must not hide why the berthd
        // before it exited.
        let log_file = std::fs::File::options()
            .create(true)
            .append(true)
            .open(&log)
            .expect("log file");
        let child = sandbox
            .command(config)
            .arg("--log-level")
            .arg("debug")
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .expect("spawn berthd");
        let mut berthd = Self {
            sandbox,
            child: Some(child),
            log,
        };
        berthd.wait_for_socket();
        berthd
    }

    fn wait_for_socket(&mut self) {
        let deadline = Instant::now() + START_TIMEOUT;
        let socket = self.sandbox.socket();
        loop {
            if std::os::unix::net::UnixStream::connect(&socket).is_ok() {
                return;
            }
            if let Some(status) = self.child_mut().try_wait().expect("wait") {
                panic!("berthd exited early ({status}): {}", self.log_text());
            }
            assert!(
                Instant::now() < deadline,
                "berthd did not listen in time: {}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn child_mut(&mut self) -> &mut Child {
        self.child.as_mut().expect("berthd still owned")
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().expect("berthd still owned").id() as i32
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The log once every one of `needles` is in it, or as it is after
    /// the start-up bound. berthd listens before its start-up recovery
    /// runs, so what recovery logs may come after the socket answers.
    pub fn log_once_it_has(&self, needles: &[&str]) -> String {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let log = self.log_text();
            if needles.iter().all(|n| log.contains(n)) || Instant::now() >= deadline {
                return log;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub async fn runtime_client(&self) -> RuntimeServiceClient<Channel> {
        RuntimeServiceClient::new(connect(&self.sandbox.socket()).await)
    }

    pub async fn image_client(&self) -> ImageServiceClient<Channel> {
        ImageServiceClient::new(connect(&self.sandbox.socket()).await)
    }

    /// Sends `signal` and waits for the exit status.
    pub fn stop_with(&mut self, signal: nix::sys::signal::Signal) -> ExitStatus {
        let mut child = self.child.take().expect("berthd still owned");
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), signal)
            .expect("signal berthd");
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = child.try_wait().expect("wait") {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("berthd ignored {signal}: {}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Berthd {
    /// Stops berthd with `signal`, waits `down` (what happens meanwhile is
    /// what a restart must find), then starts a new one on the same dirs
    /// and config. Returns how the old one exited.
    pub fn restart_on_same_dirs(
        &mut self,
        signal: nix::sys::signal::Signal,
        down: Duration,
    ) -> ExitStatus {
        let status = self.stop_with(signal);
        std::thread::sleep(down);
        let sandbox = std::mem::take(&mut self.sandbox);
        let config = sandbox.config_path();
        let restarted = Berthd::start_in(sandbox, &config);
        // The old handle owns no process any more and a fresh empty sandbox.
        drop(std::mem::replace(self, restarted));
        status
    }

    /// Best effort, for cleanup after a failed test: removes every pod
    /// through berthd. Blocking, so it can run from `Drop`.
    pub fn remove_all_pods_blocking(&self) {
        let socket = self.sandbox.socket();
        if !socket.exists() {
            return;
        }
        let worker = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                let cleanup = async {
                    let mut client = RuntimeServiceClient::new(connect(&socket).await);
                    let pods = client
                        .list_pod_sandbox(cri_api::v1::ListPodSandboxRequest::default())
                        .await
                        .map(|response| response.into_inner().items)
                        .unwrap_or_default();
                    for pod in pods {
                        let _ = client
                            .remove_pod_sandbox(cri_api::v1::RemovePodSandboxRequest {
                                pod_sandbox_id: pod.id,
                            })
                            .await;
                    }
                };
                let _ = tokio::time::timeout(Duration::from_secs(60), cleanup).await;
            });
        });
        let _ = worker.join();
    }
}

impl Drop for Berthd {
    fn drop(&mut self) {
        if self.child.is_some() {
            let status = self.stop_with(nix::sys::signal::Signal::SIGTERM);
            if !std::thread::panicking() {
                assert!(
                    status.success(),
                    "berthd exited with {status} (signal {:?}) on SIGTERM: {}",
                    status.signal(),
                    self.log_text()
                );
            }
        }
    }
}

/// A gRPC channel over the unix socket at `path`.
pub async fn connect(path: &Path) -> Channel {
    let path = path.to_path_buf();
    // The URI is required by the API but unused: the connector dials the socket.
    Endpoint::try_from("http://[::]:50051")
        .expect("endpoint")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        }))
        .await
        .expect("connect to berthd")
}
