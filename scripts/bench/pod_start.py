#!/usr/bin/env python3
"""Times pods from their creation to Running as the API server sees them.

    pod_start.py OUT RUNTIME LABEL PODS TIMEOUT_SECONDS KUBECTL [ARGS...]

Runs `KUBECTL ARGS get pods --watch -o json --output-watch-events` (start it
before the pods are created), reads its stream of events (concatenated JSON
objects) and stamps
each with this machine's clock as it arrives: a pod's first event (ADDED) is
its creation, the first event showing it in phase Running with every
container ready is its start. The API server's own timestamps have a
resolution of a second, too coarse for a start of a few seconds. Returns
once PODS pods are running, or after TIMEOUT_SECONDS (then exit status 1,
the pods still pending named on stderr). Records, appended to OUT as JSON
lines (ms): `kubelet/create to running LABEL` (one sample per pod) and
`kubelet/all running LABEL` (the first creation to the last start).
"""

import codecs
import json
import os
import select
import subprocess
import sys
import time


def running(pod: dict) -> bool:
    status = pod.get("status", {})
    if status.get("phase") != "Running":
        return False
    containers = status.get("containerStatuses") or []
    return bool(containers) and all(c.get("ready") for c in containers)


def main() -> int:
    if len(sys.argv) < 7:
        print(__doc__, file=sys.stderr)
        return 2
    out, runtime, label, pods, timeout = sys.argv[1:6]
    watch = subprocess.Popen([*sys.argv[6:], "get", "pods", "--watch", "-o", "json",
                              "--output-watch-events"], stdout=subprocess.PIPE)
    try:
        return collect(watch.stdout.fileno(), out, runtime, label, int(pods), timeout)
    finally:
        watch.terminate()
        watch.wait()


def collect(fd, out, runtime, label, pods, timeout) -> int:
    deadline = time.monotonic() + float(timeout)
    created: dict[str, float] = {}
    started: dict[str, float] = {}
    decoder = json.JSONDecoder()
    buf = ""
    utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
    while len(started) < pods:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        now = time.monotonic()
        buf += utf8.decode(chunk)
        while True:
            buf = buf.lstrip()
            try:
                event, end = decoder.raw_decode(buf)
            except json.JSONDecodeError:
                break
            buf = buf[end:]
            pod = event.get("object", {})
            name = pod.get("metadata", {}).get("name")
            if not name:
                continue
            created.setdefault(name, now)
            if name not in started and running(pod):
                started[name] = now
    if len(started) < pods:
        pending = sorted(set(created) - set(started))
        print(f"pod_start: {len(started)} of {pods} pods running after {timeout} s; "
              f"pending: {' '.join(pending[:20])}", file=sys.stderr)
        return 1
    samples = [(started[n] - created[n]) * 1000.0 for n in started]
    wall = (max(started.values()) - min(created.values())) * 1000.0
    with open(out, "a", encoding="utf-8") as f:
        f.write(json.dumps({"runtime": runtime, "metric": f"kubelet/create to running {label}",
                            "unit": "ms", "samples": samples}) + "\n")
        f.write(json.dumps({"runtime": runtime, "metric": f"kubelet/all running {label}",
                            "unit": "ms", "samples": [wall]}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
