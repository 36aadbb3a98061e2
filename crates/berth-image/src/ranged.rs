//! One large blob fetched over several connections at once: object
//! stores and CDNs limit each connection's throughput, so a multi-GiB
//! layer over one connection takes minutes however fast the link is.
//!
//! The blob is cut into fixed-size chunks ([`plan`]). Each connection
//! takes the next chunk not yet taken and sends its bytes, as they arrive,
//! into that chunk's own channel; the blob is read back chunk by chunk in
//! order, so the chunk at the head streams straight into the unpacker and
//! later ones wait in memory. A connection takes a chunk only while it is
//! fewer than [`Ranged::window`] chunks ahead of the one being read, which
//! bounds that memory. A chunk whose request fails is asked for again from
//! the byte where it stopped, a few times, before the download fails.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use futures_util::StreamExt;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

/// The bytes of one request's body, as they arrive.
pub type ByteStream = BoxStream<'static, Result<Bytes, String>>;

/// Opens a request for a byte range of the blob (`start..end`).
pub type FetchRange =
    Arc<dyn Fn(Range<u64>) -> BoxFuture<'static, Result<ByteStream, String>> + Send + Sync>;

/// How large blobs are split. Not a config key: the defaults suit object
/// stores and CDNs; tests shrink them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ranged {
    /// Blobs at least this large are fetched in ranges when the registry
    /// answers a range request with 206.
    pub threshold: u64,
    /// Bytes per ranged request.
    pub chunk: u64,
    /// Connections one blob uses at most.
    pub connections: usize,
}

impl Default for Ranged {
    fn default() -> Self {
        Self {
            threshold: 64 << 20,
            chunk: 8 << 20,
            connections: 4,
        }
    }
}

impl Ranged {
    /// Chunks fetched but not yet read, at most: two per connection, so a
    /// connection that finished its chunk goes on while the head one is
    /// still arriving (64 MiB with the defaults).
    pub fn window(connections: usize) -> usize {
        connections.max(1) * 2
    }
}

/// Attempts at one chunk before the download fails.
const CHUNK_ATTEMPTS: u32 = 4;

/// The blob's chunks, in order: `chunk` bytes each, the last one shorter.
pub fn plan(total: u64, chunk: u64) -> Vec<Range<u64>> {
    let chunk = chunk.max(1);
    (0..total.div_ceil(chunk))
        .map(|i| i * chunk..((i + 1) * chunk).min(total))
        .collect()
}

/// `bytes=start-last` for a request of `range` (end exclusive).
pub fn range_header(range: &Range<u64>) -> String {
    format!("bytes={}-{}", range.start, range.end.saturating_sub(1))
}

/// Parses a `Content-Range: bytes start-last/total` answer into the range
/// it covers (end exclusive) and the total, if given (`*` is unknown).
pub fn parse_content_range(value: &str) -> Option<(Range<u64>, Option<u64>)> {
    let rest = value.trim().strip_prefix("bytes")?.trim_start();
    let (span, total) = rest.split_once('/')?;
    let (start, last) = span.trim().split_once('-')?;
    let start: u64 = start.trim().parse().ok()?;
    let last: u64 = last.trim().parse().ok()?;
    if last < start {
        return None;
    }
    let total = match total.trim() {
        "*" => None,
        total => Some(total.parse().ok()?),
    };
    Some((start..last + 1, total))
}

/// Downloads the blob of `total` bytes in chunks over `connections`
/// connections and returns its bytes in order. `first` is the already open
/// body of the first chunk (the request that showed ranges work); `fetch`
/// opens the others. `permits` (extra connections taken from the daemon's
/// budget) are held until the stream is dropped. Dropping the stream stops
/// every request still running.
pub fn download(
    total: u64,
    settings: Ranged,
    connections: usize,
    first: ByteStream,
    fetch: FetchRange,
    permits: Vec<OwnedSemaphorePermit>,
) -> ByteStream {
    let chunks = plan(total, settings.chunk);
    let connections = connections.clamp(1, chunks.len().max(1));
    let window = Ranged::window(connections);
    let mut receivers = VecDeque::with_capacity(chunks.len());
    let mut queue = VecDeque::with_capacity(chunks.len());
    for range in chunks {
        let (sender, receiver) = mpsc::unbounded_channel();
        receivers.push_back((range.clone(), receiver));
        queue.push_back((range, sender));
    }
    // The first chunk is already open: its connection starts with it.
    let head = queue.pop_front();
    let queue = Arc::new(Mutex::new(queue));
    // Taken per chunk; given back as each chunk has been read.
    let ahead = Arc::new(Semaphore::new(window.saturating_sub(1)));
    let mut workers = Vec::with_capacity(connections);
    workers.push(tokio::spawn(worker(
        head.map(|(range, sender)| (range, sender, first)),
        queue.clone(),
        ahead.clone(),
        fetch.clone(),
    )));
    for _ in 1..connections {
        workers.push(tokio::spawn(worker(
            None,
            queue.clone(),
            ahead.clone(),
            fetch.clone(),
        )));
    }
    let reader = Reader {
        receivers,
        current: None,
        ahead,
        workers,
        _permits: permits,
    };
    futures_util::stream::unfold(reader, |mut reader| async move {
        let item = reader.next().await?;
        Some((item, reader))
    })
    .boxed()
}

/// Where a chunk's bytes go, and where they are read from.
type PieceSender = mpsc::UnboundedSender<Result<Bytes, String>>;
type PieceReceiver = mpsc::UnboundedReceiver<Result<Bytes, String>>;
/// A chunk to fetch, where its bytes go, and its already open request.
type Job = (Range<u64>, PieceSender, ByteStream);
type Queue = Arc<Mutex<VecDeque<(Range<u64>, PieceSender)>>>;

/// One connection: fetches chunks, in order of the queue, until none is
/// left, the reader is gone, or a chunk failed for good.
async fn worker(first: Option<Job>, queue: Queue, ahead: Arc<Semaphore>, fetch: FetchRange) {
    if let Some((range, sender, stream)) = first {
        if !fetch_chunk(range, &sender, Some(stream), &fetch).await {
            return;
        }
    }
    loop {
        let Ok(permit) = ahead.acquire().await else {
            return;
        };
        // Given back by the reader once it has read the chunk.
        permit.forget();
        let next = queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .pop_front();
        let Some((range, sender)) = next else {
            return;
        };
        if !fetch_chunk(range, &sender, None, &fetch).await {
            return;
        }
    }
}

/// Fetches one chunk into `sender`, resuming from the byte where a failed
/// request stopped. False when the download is over for this connection
/// (the chunk failed for good, or no one reads it any more).
async fn fetch_chunk(
    range: Range<u64>,
    sender: &PieceSender,
    mut open: Option<ByteStream>,
    fetch: &FetchRange,
) -> bool {
    let mut at = range.start;
    let mut failures = 0;
    loop {
        let mut stream = match open.take() {
            Some(stream) => stream,
            None => match fetch(at..range.end).await {
                Ok(stream) => stream,
                Err(error) => {
                    failures += 1;
                    if failures >= CHUNK_ATTEMPTS {
                        let _ = sender.send(Err(error));
                        return false;
                    }
                    backoff(failures).await;
                    continue;
                }
            },
        };
        let mut failed = None;
        while let Some(piece) = stream.next().await {
            match piece {
                Ok(piece) => {
                    let end = at + piece.len() as u64;
                    if end > range.end {
                        let _ = sender.send(Err(format!(
                            "the registry sent more than the {} bytes asked for at offset {}",
                            range.end - range.start,
                            range.start
                        )));
                        return false;
                    }
                    if !piece.is_empty() {
                        // Progress: the attempts count again from zero.
                        failures = 0;
                    }
                    at = end;
                    if sender.send(Ok(piece)).is_err() {
                        return false;
                    }
                }
                Err(error) => {
                    failed = Some(error);
                    break;
                }
            }
        }
        if at == range.end && failed.is_none() {
            return true;
        }
        failures += 1;
        let error = failed.unwrap_or_else(|| {
            format!(
                "range {}-{} ended after {} bytes",
                range.start,
                range.end - 1,
                at - range.start
            )
        });
        tracing::debug!(start = range.start, at, %error, "ranged request failed, resuming");
        if failures >= CHUNK_ATTEMPTS {
            let _ = sender.send(Err(error));
            return false;
        }
        backoff(failures).await;
    }
}

/// A short pause before asking again, longer after each failure.
async fn backoff(failures: u32) {
    tokio::time::sleep(Duration::from_millis(200 * u64::from(failures))).await;
}

/// Reads the chunks back in order.
struct Reader {
    receivers: VecDeque<(Range<u64>, PieceReceiver)>,
    /// The chunk being read and how many of its bytes came so far.
    current: Option<(Range<u64>, u64, PieceReceiver)>,
    ahead: Arc<Semaphore>,
    workers: Vec<JoinHandle<()>>,
    _permits: Vec<OwnedSemaphorePermit>,
}

impl Reader {
    async fn next(&mut self) -> Option<Result<Bytes, String>> {
        loop {
            if self.current.is_none() {
                let (range, receiver) = self.receivers.pop_front()?;
                self.current = Some((range, 0, receiver));
            }
            let (range, received, receiver) = self.current.as_mut()?;
            match receiver.recv().await {
                Some(Ok(piece)) => {
                    *received += piece.len() as u64;
                    return Some(Ok(piece));
                }
                Some(Err(error)) => {
                    self.stop();
                    return Some(Err(error));
                }
                None if *received == range.end - range.start => {
                    self.current = None;
                    self.ahead.add_permits(1);
                }
                None => {
                    let error = format!(
                        "range {}-{} ended after {} bytes",
                        range.start,
                        range.end - 1,
                        received
                    );
                    self.stop();
                    return Some(Err(error));
                }
            }
        }
    }

    /// Ends the download: no more items, no connection left running.
    fn stop(&mut self) {
        self.receivers.clear();
        self.current = None;
        self.ahead.close();
        for worker in &self.workers {
            worker.abort();
        }
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn plans_cover_the_blob_once_in_order() {
        assert_eq!(plan(10, 4), vec![0..4, 4..8, 8..10]);
        assert_eq!(plan(8, 4), vec![0..4, 4..8]);
        assert_eq!(plan(3, 4), vec![0..3]);
        assert!(plan(0, 4).is_empty());
        let chunks = plan(1_610_612_736 + 5, 8 << 20);
        assert_eq!(chunks.len(), 193);
        assert_eq!(chunks.last(), Some(&(1_610_612_736..1_610_612_741)));
        assert!(chunks.windows(2).all(|pair| pair[0].end == pair[1].start));
    }

    #[test]
    fn content_ranges_parse() {
        assert_eq!(
            parse_content_range("bytes 0-99/1000"),
            Some((0..100, Some(1000)))
        );
        assert_eq!(parse_content_range("bytes 5-5/*"), Some((5..6, None)));
        assert_eq!(parse_content_range("bytes 9-5/10"), None);
        assert_eq!(parse_content_range("items 0-1/2"), None);
        assert_eq!(parse_content_range("bytes */1000"), None);
        assert_eq!(range_header(&(100..200)), "bytes=100-199");
    }

    fn blob(len: usize) -> Arc<Vec<u8>> {
        Arc::new((0..len).map(|i| (i * 7 + i / 251) as u8).collect())
    }

    /// Serves ranges of `data` in pieces of 3 bytes; the ranges whose start
    /// `cut` selects fail after their first piece, once each.
    fn server(data: Arc<Vec<u8>>, cut: fn(u64) -> bool, requests: Arc<AtomicUsize>) -> FetchRange {
        let failed = Arc::new(Mutex::new(std::collections::HashSet::new()));
        Arc::new(move |range: Range<u64>| {
            requests.fetch_add(1, Ordering::SeqCst);
            let bytes = data[range.start as usize..range.end as usize].to_vec();
            let fail = cut(range.start) && failed.lock().unwrap().insert(range.start);
            Box::pin(async move {
                let mut pieces: Vec<Result<Bytes, String>> = bytes
                    .chunks(3)
                    .map(|piece| Ok(Bytes::copy_from_slice(piece)))
                    .collect();
                if fail {
                    pieces.truncate(1);
                    pieces.push(Err("connection reset".to_string()));
                }
                Ok(futures_util::stream::iter(pieces).boxed())
            })
        })
    }

    async fn collect(mut stream: ByteStream) -> Result<Vec<u8>, String> {
        let mut out = Vec::new();
        while let Some(piece) = stream.next().await {
            out.extend_from_slice(&piece?);
        }
        Ok(out)
    }

    fn settings(chunk: u64) -> Ranged {
        Ranged {
            threshold: 0,
            chunk,
            connections: 4,
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn chunks_come_back_in_order_over_many_connections() {
        let data = blob(1000);
        let requests = Arc::new(AtomicUsize::new(0));
        let fetch = server(data.clone(), |_| false, requests.clone());
        let first = fetch(0..64).await.unwrap();
        let stream = download(1000, settings(64), 4, first, fetch, Vec::new());
        assert_eq!(collect(stream).await.unwrap(), *data);
        // One request per chunk: 16 chunks, none asked twice.
        assert_eq!(requests.load(Ordering::SeqCst), 16);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_chunk_resumes_where_it_stopped() {
        let data = blob(1000);
        let requests = Arc::new(AtomicUsize::new(0));
        // The first chunk and every third one after it break once.
        let fetch = server(data.clone(), |start| start % 192 == 0, requests.clone());
        let first = fetch(0..64).await.unwrap();
        let stream = download(1000, settings(64), 3, first, fetch, Vec::new());
        assert_eq!(collect(stream).await.unwrap(), *data);
        // 16 chunks; 0, 192, 384, 576, 768, 960 broke and were asked again
        // from where they stopped.
        assert_eq!(requests.load(Ordering::SeqCst), 16 + 6);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_chunk_failing_every_time_fails_the_download() {
        let data = blob(300);
        let fetch: FetchRange = {
            let data = data.clone();
            Arc::new(move |range: Range<u64>| {
                let data = data.clone();
                Box::pin(async move {
                    if range.start >= 128 {
                        return Err(format!("503 at {}", range.start));
                    }
                    let piece =
                        Bytes::copy_from_slice(&data[range.start as usize..range.end as usize]);
                    Ok(futures_util::stream::iter(vec![Ok(piece)]).boxed())
                })
            })
        };
        let first = fetch(0..64).await.unwrap();
        let stream = download(300, settings(64), 2, first, fetch, Vec::new());
        let error = collect(stream).await.unwrap_err();
        assert!(error.contains("503 at 128"), "{error}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_registry_sending_more_than_asked_fails() {
        let fetch: FetchRange = Arc::new(move |_range: Range<u64>| {
            Box::pin(async move {
                let piece = Bytes::from(vec![0u8; 100]);
                Ok(futures_util::stream::iter(vec![Ok(piece)]).boxed())
            })
        });
        let first = fetch(0..64).await.unwrap();
        let stream = download(200, settings(64), 2, first, fetch, Vec::new());
        let error = collect(stream).await.unwrap_err();
        assert!(error.contains("more than the 64 bytes"), "{error}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn connections_stay_within_the_window_of_the_reader() {
        // A reader that never reads past the first piece: the connections
        // may fetch at most the window's chunks, not the whole blob.
        let data = blob(64 * 40);
        let requests = Arc::new(AtomicUsize::new(0));
        let fetch = server(data.clone(), |_| false, requests.clone());
        let first = fetch(0..64).await.unwrap();
        let mut stream = download(64 * 40, settings(64), 2, first, fetch, Vec::new());
        let _ = stream.next().await.unwrap().unwrap();
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
        // The first chunk plus window - 1 more.
        assert!(requests.load(Ordering::SeqCst) <= Ranged::window(2));
        drop(stream);
    }
}
