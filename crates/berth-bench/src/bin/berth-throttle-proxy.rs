//! `berth-throttle-proxy`: a TCP proxy for the bench that limits each
//! connection's download throughput, as CDNs and object stores do, so a
//! pull over one connection and a pull over several differ as they do in
//! the field (a loopback registry has no such limit).
//!
//! It listens on loopback (a free port unless `--listen` names one), prints
//! the address it listens on as its first line, and forwards every
//! connection to `--upstream`; bytes from the upstream are paced to
//! `--rate-mib` MiB/s per connection, requests go through unpaced. It is
//! byte-transparent, so HTTP keep-alive, ranges and redirects pass as they
//! are.

#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use clap::Parser;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[derive(Parser)]
#[command(about = "Forwards TCP to an upstream, pacing each connection's downloads")]
struct Cli {
    /// Address to listen on (loopback; port 0 picks a free one).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Where connections go (the registry).
    #[arg(long)]
    upstream: SocketAddr,
    /// Download throughput of one connection, MiB/s.
    #[arg(long, default_value_t = 20.0)]
    rate_mib: f64,
}

/// Bytes forwarded per read: small next to a second's worth, so the pace
/// is smooth.
const SLICE: usize = 64 << 10;

#[tokio::main]
async fn main() {
    if let Err(error) = run(Cli::parse()).await {
        eprintln!("berth-throttle-proxy: {error}");
        std::process::exit(1);
    }
}

async fn run(cli: Cli) -> Result<(), String> {
    if !cli.listen.ip().is_loopback() {
        return Err(format!("--listen {}: only loopback addresses", cli.listen));
    }
    if !(cli.rate_mib.is_finite() && cli.rate_mib > 0.0) {
        return Err(format!("--rate-mib {}: must be above 0", cli.rate_mib));
    }
    let rate = cli.rate_mib * f64::from(1u32 << 20);
    let listener = TcpListener::bind(cli.listen)
        .await
        .map_err(|err| format!("listening on {}: {err}", cli.listen))?;
    let local = listener
        .local_addr()
        .map_err(|err| format!("local address: {err}"))?;
    println!("{local}");
    loop {
        let (client, _) = listener
            .accept()
            .await
            .map_err(|err| format!("accept: {err}"))?;
        let upstream = cli.upstream;
        tokio::spawn(async move {
            if let Err(error) = forward(client, upstream, rate).await {
                eprintln!("berth-throttle-proxy: connection: {error}");
            }
        });
    }
}

/// Forwards one connection both ways until either side closes it.
async fn forward(client: TcpStream, upstream: SocketAddr, rate: f64) -> std::io::Result<()> {
    let server = TcpStream::connect(upstream).await?;
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let requests = async {
        let copied = tokio::io::copy(&mut client_read, &mut server_write).await;
        let _ = server_write.shutdown().await;
        copied.map(|_| ())
    };
    let responses = async {
        let paced = paced_copy(&mut server_read, &mut client_write, rate).await;
        let _ = client_write.shutdown().await;
        paced
    };
    let (requests, responses) = tokio::join!(requests, responses);
    requests.and(responses)
}

/// Copies `from` into `to` at no more than `rate` bytes a second on
/// average since the connection opened (a connection idle for a while
/// does not get a burst: the budget counts from the first byte after the
/// last idle second).
async fn paced_copy(
    from: &mut (impl AsyncReadExt + Unpin),
    to: &mut (impl AsyncWriteExt + Unpin),
    rate: f64,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; SLICE];
    let mut start = Instant::now();
    let mut sent: u64 = 0;
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        // Idle (waiting for the next request on a kept-alive connection):
        // the pace starts over rather than banking the idle time.
        let due = Duration::from_secs_f64(sent as f64 / rate);
        if start.elapsed() > due + Duration::from_secs(1) {
            start = Instant::now();
            sent = 0;
        }
        to.write_all(&buf[..n]).await?;
        sent += n as u64;
        let due = Duration::from_secs_f64(sent as f64 / rate);
        let elapsed = start.elapsed();
        if due > elapsed {
            tokio::time::sleep(due - elapsed).await;
        }
    }
}
