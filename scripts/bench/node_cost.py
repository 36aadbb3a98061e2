#!/usr/bin/env python3
"""What a full node costs: kubelet's pod-start SLI, and the idle CPU and
memory of the runtime's processes.

    node_cost.py sli OUT RUNTIME LABEL METRICS_FILE [KUBELET_LOG]
    node_cost.py idle OUT RUNTIME LABEL SECONDS KUBELET_PID DAEMON_PID 'PIDFILE_GLOB' [...]

`sli` reads kubelet's /metrics text and records the p50 and p99 of
kubelet_pod_start_sli_duration_seconds (pod creation to its containers
running, image pulls left out: the Kubernetes pod-startup SLI),
interpolated within its bucket as Prometheus' histogram_quantile does (ms).
Its buckets are coarse (nothing between 10 and 20 s), so with KUBELET_LOG it
also records the exact per-pod values kubelet observes into that histogram
(its "Observed pod startup duration" lines, podStartSLOduration), one
sample per pod, whose p50 and p99 the report takes; and where kubelet's own
time goes: the mean wait from a pod's status change to its write to the API
server (kubelet_pod_status_sync_duration_seconds) with the number of such
writes, and the mean PLEG relist (kubelet_pleg_relist_duration_seconds).

`idle` sums the CPU time (user + system) that the runtime's processes use in
SECONDS of wall time: the daemon, its per-pod helpers (found through pid
files, as memory.py finds them) and containerd's pause processes (the
sandbox containers, which berth does not have); kubelet's apart. Then their
memory (RSS and PSS from smaps_rollup) at the end. A process that comes or
goes within the window counts for the part it was there. Records (JSON
lines appended to OUT): `idle/runtime CPU s LABEL`, `idle/daemon CPU s
LABEL`, `idle/kubelet CPU s LABEL`, `idle/runtime RSS LABEL`, `idle/runtime
PSS LABEL` (MiB), `idle/runtime processes LABEL` (count).
"""

import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from memory import children, cmdline, helper_pids, rollup  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def record(out, runtime, metric, unit, value):
    record_samples(out, runtime, metric, unit, [value])


def record_samples(out, runtime, metric, unit, samples):
    with open(out, "a", encoding="utf-8") as f:
        f.write(json.dumps({"runtime": runtime, "metric": metric, "unit": unit,
                            "samples": samples}) + "\n")


def quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """histogram_quantile over cumulative (upper bound, count) buckets."""
    buckets = sorted(buckets)
    if not buckets or buckets[-1][1] == 0:
        return None
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for upper, count in buckets:
        if count >= rank:
            if upper == float("inf"):
                return lower
            if count == below:
                return upper
            return lower + (upper - lower) * (rank - below) / (count - below)
        lower, below = upper, count
    return None


def summary(text: str, name: str) -> tuple[float, float] | None:
    """(sum, count) of an unlabelled histogram or summary."""
    total = re.search(rf"^{name}_sum (\S+)$", text, re.M)
    count = re.search(rf"^{name}_count (\S+)$", text, re.M)
    if not total or not count:
        return None
    return float(total.group(1)), float(count.group(1))


def kubelet_side(out, runtime, label, text, log) -> None:
    values = []
    with open(log, encoding="utf-8", errors="replace") as f:
        for line in f:
            if "Observed pod startup duration" in line:
                m = re.search(r"podStartSLOduration=([0-9.e+-]+)", line)
                if m:
                    values.append(float(m.group(1)))
    if values:
        # One sample per pod: the report takes their p50 and p99.
        record_samples(out, runtime, f"kubelet/pod start SLI per pod {label}", "ms",
                       [v * 1000.0 for v in values])
    syncs = summary(text, "kubelet_pod_status_sync_duration_seconds")
    if syncs and syncs[1]:
        record(out, runtime, f"kubelet/status write wait (mean) {label}", "ms",
               syncs[0] / syncs[1] * 1000.0)
        record(out, runtime, f"kubelet/status writes (count) {label}", "count", syncs[1])
    relist = summary(text, "kubelet_pleg_relist_duration_seconds")
    if relist and relist[1]:
        record(out, runtime, f"kubelet/PLEG relist (mean) {label}", "ms",
               relist[0] / relist[1] * 1000.0)


def sli(out, runtime, label, path, log=None) -> int:
    text = open(path, encoding="utf-8").read()
    if log:
        kubelet_side(out, runtime, label, text, log)
    for name, short in (("kubelet_pod_start_sli_duration_seconds", "pod start SLI"),):
        buckets = []
        for m in re.finditer(rf'^{name}_bucket{{[^}}]*le="([^"]+)"[^}}]*}} (\S+)$', text, re.M):
            buckets.append((float(m.group(1)), float(m.group(2))))
        if not buckets:
            print(f"node_cost: no {name} in {path}", file=sys.stderr)
            return 1
        for q, tag in ((0.5, "p50"), (0.99, "p99")):
            v = quantile(q, buckets)
            if v is not None:
                record(out, runtime, f"kubelet/{short} {tag} {label}", "ms", v * 1000.0)
    return 0


def cpu_ticks(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime, stime
    except (OSError, IndexError, ValueError):
        return None


def runtime_pids(daemon: int, globs: list[str]) -> tuple[list[int], list[int]]:
    """(helpers, pause processes) of the runtime."""
    helpers = helper_pids(globs)
    pause = [c for h in helpers for c in children(h) if cmdline(c) == "/pause"]
    return helpers, pause


def idle(out, runtime, label, seconds, kubelet, daemon, globs) -> int:
    helpers, pause = runtime_pids(daemon, globs)
    procs = [daemon, kubelet, *helpers, *pause]
    start = {p: cpu_ticks(p) for p in procs}
    time.sleep(seconds)
    helpers2, pause2 = runtime_pids(daemon, globs)
    # Those that came within the window count from zero.
    for p in (*helpers2, *pause2):
        start.setdefault(p, 0)
    end = {p: cpu_ticks(p) for p in start}

    def used(pids):
        return sum((end[p] - start[p]) for p in pids
                   if start.get(p) is not None and end.get(p) is not None) / TICK

    runtime_set = {daemon, *helpers, *pause, *helpers2, *pause2}
    record(out, runtime, f"idle/runtime CPU s {label}", "s", used(runtime_set))
    record(out, runtime, f"idle/daemon CPU s {label}", "s", used([daemon]))
    record(out, runtime, f"idle/kubelet CPU s {label}", "s", used([kubelet]))
    rss = pss = 0.0
    alive = [p for p in {daemon, *helpers2, *pause2} if os.path.exists(f"/proc/{p}/smaps_rollup")]
    for p in alive:
        r, s = rollup(p)
        rss += r
        pss += s
    record(out, runtime, f"idle/runtime RSS {label}", "MiB", rss)
    record(out, runtime, f"idle/runtime PSS {label}", "MiB", pss)
    record(out, runtime, f"idle/runtime processes {label}", "count", float(len(alive)))
    return 0


def main() -> int:
    args = sys.argv[1:]
    if len(args) in (5, 6) and args[0] == "sli":
        return sli(*args[1:])
    if len(args) >= 8 and args[0] == "idle":
        out, runtime, label, seconds, kubelet, daemon = args[1:7]
        return idle(out, runtime, label, float(seconds), int(kubelet), int(daemon), args[7:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
