#!/usr/bin/env python3
"""Turns critest -benchmark output into bench records.

    critest_results.py OUT RUNTIME DIR

DIR is critest's --benchmarking-output-dir: pod_benchmark_data.json,
container_benchmark_data.json, image_lifecycle_benchmark_data.json and
image_listing_benchmark_data.json, each with operationsNames and per-sample
operationsDurationsNs. Every operation becomes a record critest/<operation>
(ms, appended to OUT as JSON lines).
"""

import json
import os
import sys

FILES = ["pod_benchmark_data.json", "container_benchmark_data.json",
         "image_lifecycle_benchmark_data.json", "image_listing_benchmark_data.json"]
# critest's operation names, as CRI RPC names.
RPC = {"CreatePod": "RunPodSandbox", "StatusPod": "PodSandboxStatus",
       "StopPod": "StopPodSandbox", "RemovePod": "RemovePodSandbox",
       "StatusContainer": "ContainerStatus", "StatusImage": "ImageStatus"}


def main() -> int:
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    out, runtime, directory = sys.argv[1:4]
    records = []
    for name in FILES:
        path = os.path.join(directory, name)
        if not os.path.exists(path):
            print(f"critest_results: no {path}", file=sys.stderr)
            return 1
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        ops = data["operationsNames"]
        for i, op in enumerate(ops):
            samples = [p["operationsDurationsNs"][i] / 1e6 for p in data["datapoints"]
                       if len(p["operationsDurationsNs"]) == len(ops)]
            records.append({"runtime": runtime, "metric": f"critest/{RPC.get(op, op)}",
                            "unit": "ms", "samples": samples})
    with open(out, "a", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
