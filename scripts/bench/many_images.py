#!/usr/bin/env python3
"""Pushes COUNT small distinct images to a local registry over its HTTP API.

    many_images.py REGISTRY COUNT LIST_FILE     e.g. localhost:5070 100 /tmp/x/many.txt

Image i is REGISTRY/bench/many-NNN:latest: one gzip layer holding the file
/bench-many-NNN, and a config naming it. They exist for warm ImageStatus and
ListImages timings with many images stored, where contents do not matter, so
they are built here directly instead of through umoci and skopeo (100 skopeo
runs take minutes). LIST_FILE gets one reference per line.
"""

import gzip
import hashlib
import io
import json
import sys
import tarfile
import urllib.request

EPOCH = 1700000000


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def request(method: str, url: str, data: bytes = b"", headers=None):
    req = urllib.request.Request(url, data=data if method != "GET" else None, method=method)
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    with urllib.request.urlopen(req, timeout=30) as resp:
        return resp.status, resp.headers, resp.read()


def push_blob(registry: str, repo: str, data: bytes) -> str:
    d = digest(data)
    _, headers, _ = request("POST", f"http://{registry}/v2/{repo}/blobs/uploads/")
    location = headers["Location"]
    if location.startswith("/"):
        location = f"http://{registry}{location}"
    sep = "&" if "?" in location else "?"
    request("PUT", f"{location}{sep}digest={d}", data,
            {"Content-Type": "application/octet-stream"})
    return d


def layer(name: str) -> tuple[bytes, bytes]:
    """A reproducible tar with one file, and its gzip."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        content = f"{name}\n".encode()
        info = tarfile.TarInfo(name)
        info.size = len(content)
        info.mtime = EPOCH
        info.mode = 0o644
        tar.addfile(info, io.BytesIO(content))
    tar_bytes = raw.getvalue()
    return tar_bytes, gzip.compress(tar_bytes, mtime=EPOCH)


def push_image(registry: str, index: int) -> str:
    name = f"bench-many-{index:03d}"
    repo = f"bench/many-{index:03d}"
    tar_bytes, gz = layer(name)
    config = json.dumps({
        "created": "2023-11-14T22:13:20Z",
        "architecture": "amd64",
        "os": "linux",
        "config": {"Cmd": ["/bin/sh"]},
        "rootfs": {"type": "layers", "diff_ids": [digest(tar_bytes)]},
        "history": [{"created": "2023-11-14T22:13:20Z", "created_by": f"ADD {name}"}],
    }, sort_keys=True).encode()
    layer_digest = push_blob(registry, repo, gz)
    config_digest = push_blob(registry, repo, config)
    manifest = json.dumps({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": config_digest, "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": layer_digest, "size": len(gz)}],
    }, sort_keys=True).encode()
    request("PUT", f"http://{registry}/v2/{repo}/manifests/latest", manifest,
            {"Content-Type": "application/vnd.oci.image.manifest.v1+json"})
    return f"{registry}/{repo}:latest"


def main() -> int:
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    registry, count, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    refs = [push_image(registry, i) for i in range(1, count + 1)]
    with open(out, "w", encoding="utf-8") as f:
        f.write("\n".join(refs) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
