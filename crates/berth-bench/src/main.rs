//! `berth-bench`: the CRI client of `scripts/bench.sh`.
//!
//! It times RPCs against any CRI runtime on a unix socket (berthd or
//! containerd), so both are measured by the same client with no process
//! start-up in the numbers. Each subcommand appends JSON lines
//! (`{"runtime", "metric", "unit", "samples"}`) to `--out`;
//! `scripts/bench/report.py` turns them into the table.

#![forbid(unsafe_code)]

mod client;
mod exec;
mod images;
mod pod_checkpoint;
mod record;
mod stats;
mod workload;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "Times CRI calls for scripts/bench.sh")]
struct Cli {
    /// CRI socket (runtime and image service on the same socket).
    #[arg(long)]
    socket: PathBuf,
    /// Runtime name written in every record.
    #[arg(long)]
    runtime: String,
    /// JSON-lines file the records are appended to.
    #[arg(long)]
    out: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Pod and container lifecycles one after another, timing each RPC.
    Lifecycle {
        #[command(flatten)]
        pod: workload::PodArgs,
        /// Number of lifecycles.
        #[arg(long, default_value_t = 10)]
        n: usize,
        /// Metric name prefix.
        #[arg(long, default_value = "lifecycle")]
        metric: String,
    },
    /// Starts pods with one running container each, `clients` at a time, and
    /// leaves them running (labelled with `tag`).
    Up {
        #[command(flatten)]
        pod: workload::PodArgs,
        #[arg(long)]
        pods: usize,
        #[arg(long, default_value_t = 8)]
        clients: usize,
        /// Metric name prefix; without it nothing is recorded.
        #[arg(long)]
        metric: Option<String>,
    },
    /// Stops and removes the pods labelled with `tag` (every bench pod when
    /// no tag is given), all but the `leave` oldest.
    Down {
        #[arg(long)]
        tag: Option<String>,
        #[arg(long, default_value_t = 8)]
        clients: usize,
        #[arg(long, default_value_t = 0)]
        leave: usize,
    },
    /// Removes IMAGE, then times its pull, `n` times.
    ColdPull {
        #[arg(long)]
        image: String,
        #[arg(long, default_value_t = 1)]
        n: usize,
        /// Metric the samples are recorded as.
        #[arg(long, default_value = "image/PullImage cold")]
        metric: String,
        /// Removes the image after the last pull too (a large image is
        /// not left taking disk space).
        #[arg(long)]
        remove_after: bool,
    },
    /// Pulls every image named in FILE (one per line), `clients` at a time.
    PullAll {
        #[arg(long)]
        file: PathBuf,
        #[arg(long, default_value_t = 4)]
        clients: usize,
    },
    /// CheckpointPod of `pod`'s `container`s into the empty directory
    /// `output` (records nothing).
    CheckpointPod {
        #[arg(long)]
        pod: String,
        #[arg(long)]
        output: PathBuf,
        #[arg(long = "container", required = true)]
        containers: Vec<String>,
    },
    /// RestorePod from the pod checkpoint in `dir`, with the configs it
    /// holds; prints the new pod's and containers' ids as JSON (records
    /// nothing).
    RestorePod {
        #[arg(long)]
        dir: PathBuf,
        /// The restored pod's log directory (else the checkpointed one's).
        #[arg(long)]
        log_directory: Option<String>,
    },
    /// Times ListPodSandboxStats, ListContainerStats, ListPodSandboxMetrics,
    /// ListContainers and ListPodSandbox, one after another, `n` times.
    Stats {
        #[arg(long, default_value_t = 20)]
        n: usize,
        /// Metric name prefix.
        #[arg(long)]
        metric: String,
    },
    /// Prints one running container labelled `tag`: id, pid and shim dir
    /// (berth), tab-separated (records nothing).
    Pick {
        #[arg(long)]
        tag: String,
    },
    /// Polls the status of every running container labelled `tag` but
    /// `skip`, ListContainers and ListContainerStats, `rounds` times, each
    /// round starting `every_ms` after the one before at the earliest; with
    /// `--stalled`, also times `skip`'s own status once, alongside.
    Poll {
        #[arg(long)]
        tag: String,
        #[arg(long)]
        skip: String,
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        #[arg(long, default_value_t = 0)]
        every_ms: u64,
        #[arg(long)]
        metric: String,
        #[arg(long)]
        stalled: bool,
    },
    /// ExecSync of a probe-sized command in `at_once` running containers
    /// labelled `tag` at once, `n` rounds.
    Exec {
        #[arg(long)]
        tag: String,
        #[arg(long, default_value_t = 20)]
        n: usize,
        #[arg(long, default_value_t = 1)]
        at_once: usize,
        #[arg(long, default_value = "exec")]
        metric: String,
    },
    /// Times ImageStatus of every image named in FILE, and ListImages `n` times.
    Warm {
        #[arg(long)]
        file: PathBuf,
        #[arg(long, default_value_t = 20)]
        n: usize,
    },
}

fn main() {
    let cli = Cli::parse();
    // The timed loops that make one call at a time (stats, the stall's
    // polls) run on one thread: a call's answer then wakes the thread that
    // waits for it, where a pool handed it from the connection's worker to
    // the caller's. On a loaded 2-core node each such hand-off waits for a
    // cpu: in a round of slow calls most of the time was outside the
    // runtime's handler (2-6 ms at the client, 0.15-0.5 ms in berthd's).
    // The workloads that run clients side by side keep a pool.
    let one_caller = matches!(
        cli.command,
        Command::Stats { .. } | Command::Poll { .. } | Command::Pick { .. }
    );
    let runtime = if one_caller {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .enable_all()
            .build()
    };
    let result = match runtime {
        Ok(runtime) => runtime.block_on(run(cli)),
        Err(err) => Err(format!("no tokio runtime: {err}")),
    };
    if let Err(err) = result {
        eprintln!("berth-bench: {err}");
        std::process::exit(1);
    }
}

async fn run(cli: Cli) -> Result<(), String> {
    let cri = client::Cri::connect(&cli.socket).await?;
    let out = record::Out::new(&cli.out, &cli.runtime);
    match cli.command {
        Command::Lifecycle { pod, n, metric } => {
            workload::lifecycle(&cri, &out, &pod, n, &metric).await
        }
        Command::Up {
            pod,
            pods,
            clients,
            metric,
        } => workload::up(&cri, &out, &pod, pods, clients, metric.as_deref()).await,
        Command::Down {
            tag,
            clients,
            leave,
        } => workload::down(&cri, tag.as_deref(), clients, leave).await,
        Command::ColdPull {
            image,
            n,
            metric,
            remove_after,
        } => images::cold_pull(&cri, &out, &image, n, &metric, remove_after).await,
        Command::PullAll { file, clients } => images::pull_all(&cri, &file, clients).await,
        Command::Warm { file, n } => images::warm(&cri, &out, &file, n).await,
        Command::Stats { n, metric } => stats::stats(&cri, &out, n, &metric).await,
        Command::Pick { tag } => stats::pick(&cri, &tag).await,
        Command::Poll {
            tag,
            skip,
            rounds,
            every_ms,
            metric,
            stalled,
        } => {
            let rounds = stats::Rounds {
                count: rounds,
                every: std::time::Duration::from_millis(every_ms),
            };
            stats::poll(&cri, &out, &tag, &skip, rounds, &metric, stalled).await
        }
        Command::Exec {
            tag,
            n,
            at_once,
            metric,
        } => exec::exec(&cri, &out, &tag, n, at_once, &metric).await,
        Command::CheckpointPod {
            pod,
            output,
            containers,
        } => pod_checkpoint::checkpoint(&cri, &pod, &output, &containers).await,
        Command::RestorePod { dir, log_directory } => {
            pod_checkpoint::restore(&cri, &dir, log_directory.as_deref()).await
        }
    }
}
