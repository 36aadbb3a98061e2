//! The CRI log format, as a pure state machine.
//!
//! Each record is `<timestamp> <stream> <tag> <content>\n`, where the tag is
//! `F` for a full line (its newline was seen) or `P` for a partial one.
//! Behaviour follows containerd's `internal/cri/io/logger.go`
//! (`redirectLogs`):
//! - A line ends at `\n`; a `\r` right before the `\n` is dropped too.
//! - A line longer than the limit (16 KiB by default, containerd's
//!   `max_container_log_line_size`) is cut into `P` records of exactly the
//!   limit, and the rest ends with an `F` record. A line of exactly the limit
//!   is one `F` record.
//! - An empty line is an `F` record with empty content.
//! - Content left without a newline when the stream ends is written as a
//!   `P` record (containerd: "it should be treated as a partial line"), so a
//!   reader never sees a line that was never terminated as complete.

/// containerd's and CRI-O's default maximum line size.
pub const DEFAULT_MAX_LINE: usize = 16 * 1024;

/// Which container stream a record came from (the attach frames name the
/// same two).
pub use berth_shim_api::attach::Stream;

/// Full or partial line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tag {
    Full,
    Partial,
}

impl Tag {
    pub fn as_str(self) -> &'static str {
        match self {
            Tag::Full => "F",
            Tag::Partial => "P",
        }
    }
}

/// Appends one record to `out`.
pub fn format_record(out: &mut Vec<u8>, timestamp: &str, stream: Stream, tag: Tag, content: &[u8]) {
    out.reserve(timestamp.len() + content.len() + 12);
    out.extend_from_slice(timestamp.as_bytes());
    out.push(b' ');
    out.extend_from_slice(stream.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(tag.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(content);
    out.push(b'\n');
}

/// Splits one stream's bytes into CRI log records.
#[derive(Debug)]
pub struct LineSplitter {
    stream: Stream,
    max_line: usize,
    pending: Vec<u8>,
}

impl LineSplitter {
    /// `max_line` of 0 means no limit.
    pub fn new(stream: Stream, max_line: usize) -> Self {
        Self {
            stream,
            max_line,
            pending: Vec::new(),
        }
    }

    pub fn stream(&self) -> Stream {
        self.stream
    }

    /// Bytes held back waiting for the rest of their line.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// Feeds bytes read from the stream; appends the records they complete
    /// to `out`, all stamped with `timestamp`.
    pub fn push(&mut self, mut data: &[u8], timestamp: &str, out: &mut Vec<u8>) {
        while let Some(nl) = data.iter().position(|&b| b == b'\n') {
            self.pending.extend_from_slice(&data[..nl]);
            data = &data[nl + 1..];
            if self.pending.last() == Some(&b'\r') {
                self.pending.pop();
            }
            self.emit_overlong(self.pending.len(), timestamp, out);
            format_record(out, timestamp, self.stream, Tag::Full, &self.pending);
            self.pending.clear();
        }
        self.pending.extend_from_slice(data);
        // A trailing `\r` may turn out to be half of a `\r\n`: it does not
        // count towards the limit yet.
        let content_len = self.pending.len() - usize::from(self.pending.last() == Some(&b'\r'));
        self.emit_overlong(content_len, timestamp, out);
    }

    /// The stream reached end of file: writes what is left as a partial line.
    pub fn finish(&mut self, timestamp: &str, out: &mut Vec<u8>) {
        self.emit_overlong(self.pending.len(), timestamp, out);
        if !self.pending.is_empty() {
            format_record(out, timestamp, self.stream, Tag::Partial, &self.pending);
            self.pending.clear();
        }
    }

    /// While the first `content_len` pending bytes exceed the limit, writes
    /// `max_line` of them as a partial record.
    fn emit_overlong(&mut self, mut content_len: usize, timestamp: &str, out: &mut Vec<u8>) {
        if self.max_line == 0 {
            return;
        }
        let mut start = 0;
        while content_len > self.max_line {
            let chunk = &self.pending[start..start + self.max_line];
            format_record(out, timestamp, self.stream, Tag::Partial, chunk);
            start += self.max_line;
            content_len -= self.max_line;
        }
        if start > 0 {
            self.pending.drain(..start);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TS: &str = "2016-10-06T00:17:09.669794202Z";

    fn run(max: usize, chunks: &[&[u8]], finish: bool) -> Vec<String> {
        let mut s = LineSplitter::new(Stream::Stdout, max);
        let mut out = Vec::new();
        for c in chunks {
            s.push(c, TS, &mut out);
        }
        if finish {
            s.finish(TS, &mut out);
        }
        String::from_utf8(out)
            .expect("utf8")
            .lines()
            .map(|l| l.strip_prefix(TS).expect("timestamp").to_string())
            .collect()
    }

    #[test]
    fn record_format() {
        let mut out = Vec::new();
        format_record(&mut out, TS, Stream::Stderr, Tag::Full, b"oops");
        assert_eq!(out, b"2016-10-06T00:17:09.669794202Z stderr F oops\n");
    }

    #[test]
    fn full_lines_and_crlf() {
        assert_eq!(
            run(16, &[b"hello\nworld\r\n\n"], true),
            [" stdout F hello", " stdout F world", " stdout F "]
        );
    }

    #[test]
    fn lines_across_reads() {
        assert_eq!(
            run(16, &[b"hel", b"lo\r", b"\nwor", b"ld\n"], true),
            [" stdout F hello", " stdout F world"]
        );
    }

    #[test]
    fn lone_carriage_return_is_content() {
        assert_eq!(run(16, &[b"a\rb\n"], true), [" stdout F a\rb"]);
    }

    #[test]
    fn unterminated_tail_is_partial_at_eof() {
        assert_eq!(run(16, &[b"done\nno newline"], false), [" stdout F done"]);
        assert_eq!(
            run(16, &[b"done\nno newline"], true),
            [" stdout F done", " stdout P no newline"]
        );
    }

    #[test]
    fn long_line_split_into_partials_then_full() {
        let line = "a".repeat(10);
        let data = format!("{line}\n");
        assert_eq!(
            run(4, &[data.as_bytes()], true),
            [" stdout P aaaa", " stdout P aaaa", " stdout F aa"]
        );
    }

    #[test]
    fn exact_limit_is_one_full_record() {
        assert_eq!(run(4, &[b"abcd\n"], true), [" stdout F abcd"]);
        assert_eq!(run(4, &[b"abcd\r\n"], true), [" stdout F abcd"]);
        assert_eq!(
            run(4, &[b"abcdefgh\n"], true),
            [" stdout P abcd", " stdout F efgh"]
        );
    }

    #[test]
    fn split_happens_before_the_newline_arrives() {
        let mut s = LineSplitter::new(Stream::Stdout, 4);
        let mut out = Vec::new();
        s.push(b"abcdefghij", TS, &mut out);
        let text = String::from_utf8(out.clone()).expect("utf8");
        assert_eq!(text.lines().count(), 2, "{text}");
        assert_eq!(s.pending_len(), 2);
        // a trailing CR waits: it may be half of a CRLF
        let mut s = LineSplitter::new(Stream::Stdout, 4);
        out.clear();
        s.push(b"abcd\r", TS, &mut out);
        assert!(out.is_empty());
        s.push(b"\n", TS, &mut out);
        assert_eq!(out, format!("{TS} stdout F abcd\n").as_bytes());
    }

    #[test]
    fn kubernetes_size_line() {
        let line = "x".repeat(40 * 1024);
        let data = format!("{line}\n");
        let recs = run(DEFAULT_MAX_LINE, &[data.as_bytes()], true);
        let tags: Vec<&str> = recs.iter().map(|r| &r[8..9]).collect();
        assert_eq!(tags, ["P", "P", "F"]);
        let lens: Vec<usize> = recs.iter().map(|r| r.len() - 10).collect();
        assert_eq!(lens, [16384, 16384, 8192]);
    }

    #[test]
    fn no_limit() {
        let line = "y".repeat(100);
        let recs = run(0, &[format!("{line}\n").as_bytes()], true);
        assert_eq!(recs.len(), 1);
    }

    #[test]
    fn stderr_stream_name() {
        let mut s = LineSplitter::new(Stream::Stderr, 0);
        let mut out = Vec::new();
        s.push(b"x\n", TS, &mut out);
        assert_eq!(out, format!("{TS} stderr F x\n").as_bytes());
        assert_eq!(s.stream(), Stream::Stderr);
    }
}
