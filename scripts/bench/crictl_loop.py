#!/usr/bin/env python3
"""The crictl lifecycle loop: runp, create, start, stop, rm, stopp, rmp, N times.

    crictl_loop.py OUT RUNTIME SOCKET N POD_JSON CONTAINER_JSON

Each step is one crictl process, timed from fork to exit, as an operator
or a script would see it. Records (ms, appended to OUT as JSON lines):
crictl/<step> per step and crictl/total per iteration.
"""

import json
import subprocess
import sys
import time

STEPS = ["runp", "create", "start", "stop", "rm", "stopp", "rmp"]


def main() -> int:
    if len(sys.argv) != 7:
        print(__doc__, file=sys.stderr)
        return 2
    out, runtime, socket, n, pod_json, ctr_json = sys.argv[1:7]
    base = ["crictl", "--runtime-endpoint", f"unix://{socket}",
            "--image-endpoint", f"unix://{socket}", "--timeout", "60s"]
    samples = {s: [] for s in STEPS}
    totals = []

    def step(name, *args):
        t = time.perf_counter()
        r = subprocess.run(base + [name, *args], capture_output=True, text=True, check=False)
        samples[name].append((time.perf_counter() - t) * 1000.0)
        if r.returncode != 0:
            raise SystemExit(f"crictl {name} failed: {r.stderr.strip()}")
        return r.stdout.strip()

    for _ in range(int(n)):
        t0 = time.perf_counter()
        pod = step("runp", pod_json)
        ctr = step("create", pod, ctr_json, pod_json)
        step("start", ctr)
        step("stop", ctr)
        step("rm", ctr)
        step("stopp", pod)
        step("rmp", pod)
        totals.append((time.perf_counter() - t0) * 1000.0)
    with open(out, "a", encoding="utf-8") as f:
        for s in STEPS:
            f.write(json.dumps({"runtime": runtime, "metric": f"crictl/{s}",
                                "unit": "ms", "samples": samples[s]}) + "\n")
        f.write(json.dumps({"runtime": runtime, "metric": "crictl/total",
                            "unit": "ms", "samples": totals}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
