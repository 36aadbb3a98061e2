#!/usr/bin/env python3
"""Records the memory of a runtime's daemon and of its per-pod helpers.

    memory.py OUT RUNTIME LABEL PODS DAEMON_PID 'PIDFILE_GLOB' [...]

RSS and PSS come from /proc/PID/smaps_rollup. The helpers are found through
pid files the runtime wrote, never by process name: a glob names files
holding a helper's pid (berth-shim's shim.pid), or, prefixed with
"parent-of:", files holding the pid of a process whose parent is the helper
(containerd-shim-runc-v2 writes no pid file of its own; it is the parent of
the init.pid of every task it serves). Only processes whose command line
mentions "shim" count. Children of a helper whose command line is
/pause (containerd's sandbox container) are counted separately as "pause".
Records, appended to OUT as JSON lines (MiB):
  memory/daemon RSS|PSS <LABEL>
  memory/helper RSS|PSS per pod <LABEL>       (helpers' total / PODS)
  memory/helper+pause PSS per pod <LABEL>
  memory/helpers <LABEL>                      (count, unit "count")
"""

import glob
import json
import os
import sys


def rollup(pid: int) -> tuple[float, float]:
    """(RSS, PSS) of pid in MiB."""
    values = {}
    with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2 and parts[0] in ("Rss:", "Pss:"):
                values[parts[0]] = int(parts[1]) / 1024.0
    return values.get("Rss:", 0.0), values.get("Pss:", 0.0)


def children(pid: int) -> list[int]:
    out = []
    for task in glob.glob(f"/proc/{pid}/task/*/children"):
        try:
            with open(task, encoding="ascii") as f:
                out.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return out


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("PPid:"):
                return int(line.split()[1])
    raise ValueError(f"no PPid for {pid}")


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def helper_pids(globs: list[str]) -> list[int]:
    pids = set()
    for pattern in globs:
        parent = pattern.startswith("parent-of:")
        pattern = pattern.removeprefix("parent-of:")
        for path in glob.glob(pattern):
            try:
                with open(path, encoding="ascii") as f:
                    pid = int(f.read().strip())
                if parent:
                    pid = parent_of(pid)
            except (OSError, ValueError):
                continue
            if os.path.exists(f"/proc/{pid}/smaps_rollup") and "shim" in cmdline(pid):
                pids.add(pid)
    return sorted(pids)


def main() -> int:
    if len(sys.argv) < 6:
        print(__doc__, file=sys.stderr)
        return 2
    out, runtime, label, pods, daemon = sys.argv[1:6]
    pods, daemon = int(pods), int(daemon)
    records = []

    def record(metric, unit, value):
        records.append({"runtime": runtime, "metric": metric, "unit": unit, "samples": [value]})

    rss, pss = rollup(daemon)
    record(f"memory/daemon RSS {label}", "MiB", rss)
    record(f"memory/daemon PSS {label}", "MiB", pss)
    if pods > 0:
        helpers = helper_pids(sys.argv[6:])
        h_rss = h_pss = pause_pss = 0.0
        for pid in helpers:
            r, p = rollup(pid)
            h_rss += r
            h_pss += p
            for child in children(pid):
                if cmdline(child) == "/pause":
                    pause_pss += rollup(child)[1]
        record(f"memory/helpers {label}", "count", float(len(helpers)))
        record(f"memory/helper RSS per pod {label}", "MiB", h_rss / pods)
        record(f"memory/helper PSS per pod {label}", "MiB", h_pss / pods)
        record(f"memory/helper+pause PSS per pod {label}", "MiB", (h_pss + pause_pss) / pods)
    with open(out, "a", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
