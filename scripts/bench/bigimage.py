#!/usr/bin/env python3
"""Pushes the image of bench workload 9 (a cold pull of one large layer):

    scripts/bench/bigimage.py REGISTRY SIZE_MIB

REGISTRY/bench/big:1 holds one gzip layer with one file, /big.bin, of
SIZE_MIB MiB of AES-CTR keystream: incompressible, and the same bytes (so
the same digests) on every run. The layer is streamed to the registry twice
over (once to learn its digests, once to upload it), so no copy of it is
ever written outside the registry's storage. It is gzip with stored blocks,
which is what any gzip level makes of incompressible data, without spending
minutes compressing. An image already in the registry is left as it is.
"""

import hashlib
import http.client
import json
import subprocess
import sys
import tarfile
import urllib.parse
import zlib

SLICE = 1 << 20
KEY = "6265727468206265 6e63682039206b65".replace(" ", "")
IV = "00000000000000000000000000000036"
EPOCH = 1700000000
REPO = "bench/big"
TAG = "1"


def content(size):
    """SIZE bytes of keystream, in slices."""
    zeros = subprocess.Popen(["head", "-c", str(size), "/dev/zero"], stdout=subprocess.PIPE)
    proc = subprocess.Popen(
        ["openssl", "enc", "-aes-128-ctr", "-nosalt", "-K", KEY, "-iv", IV],
        stdin=zeros.stdout,
        stdout=subprocess.PIPE,
    )
    zeros.stdout.close()
    left = size
    while left > 0:
        chunk = proc.stdout.read(min(SLICE, left))
        if not chunk:
            raise SystemExit("bigimage: openssl ended early")
        left -= len(chunk)
        yield chunk
    proc.stdout.close()
    if proc.wait() != 0 or zeros.wait() != 0:
        raise SystemExit("bigimage: generating the content failed")


def tar_stream(size):
    info = tarfile.TarInfo("big.bin")
    info.size = size
    info.mode = 0o644
    info.mtime = EPOCH
    yield info.tobuf(format=tarfile.PAX_FORMAT)
    yield from content(size)
    pad = (-size) % 512
    yield bytes(pad + 1024)


def layer(size, diff_hash):
    """The gzip layer, slice by slice, hashing the tar stream into diff_hash."""
    gz = zlib.compressobj(0, zlib.DEFLATED, 31)
    for piece in tar_stream(size):
        diff_hash.update(piece)
        out = gz.compress(piece)
        if out:
            yield out
    yield gz.flush()


def request(conn, method, path, body=None, headers=None, ok=(200, 201, 202)):
    conn.request(method, path, body=body, headers=headers or {})
    resp = conn.getresponse()
    data = resp.read()
    if resp.status not in ok:
        raise SystemExit(f"bigimage: {method} {path}: {resp.status} {data[:200]!r}")
    return resp


def upload(registry, digest, size, body):
    conn = http.client.HTTPConnection(registry, timeout=600)
    resp = request(conn, "HEAD", f"/v2/{REPO}/blobs/{digest}", ok=(200, 404))
    if resp.status == 200:
        return
    resp = request(conn, "POST", f"/v2/{REPO}/blobs/uploads/")
    location = urllib.parse.urlsplit(resp.headers["Location"])
    query = location.query + ("&" if location.query else "") + "digest=" + urllib.parse.quote(digest)
    request(
        conn,
        "PUT",
        f"{location.path}?{query}",
        body=body,
        headers={"Content-Length": str(size), "Content-Type": "application/octet-stream"},
    )
    conn.close()


def main():
    if len(sys.argv) != 3:
        raise SystemExit("usage: bigimage.py REGISTRY SIZE_MIB")
    registry, size = sys.argv[1], int(sys.argv[2]) << 20
    conn = http.client.HTTPConnection(registry, timeout=60)
    accept = "application/vnd.oci.image.manifest.v1+json"
    resp = request(conn, "HEAD", f"/v2/{REPO}/manifests/{TAG}", headers={"Accept": accept}, ok=(200, 404))
    if resp.status == 200:
        print(f"bigimage: {registry}/{REPO}:{TAG} is there already", file=sys.stderr)
        return

    diff_hash = hashlib.sha256()
    blob_hash = hashlib.sha256()
    blob_size = 0
    for piece in layer(size, diff_hash):
        blob_hash.update(piece)
        blob_size += len(piece)
    digest = "sha256:" + blob_hash.hexdigest()
    diff_id = "sha256:" + diff_hash.hexdigest()
    upload(registry, digest, blob_size, layer(size, hashlib.sha256()))

    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "created": "2023-11-14T22:13:20Z",
            "config": {},
            "rootfs": {"type": "layers", "diff_ids": [diff_id]},
            "history": [{"created": "2023-11-14T22:13:20Z", "created_by": "scripts/bench/bigimage.py"}],
        },
        sort_keys=True,
    ).encode()
    config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
    upload(registry, config_digest, len(config), config)
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": accept,
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": config_digest,
                "size": len(config),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": digest,
                    "size": blob_size,
                }
            ],
        },
        sort_keys=True,
    ).encode()
    request(conn, "PUT", f"/v2/{REPO}/manifests/{TAG}", body=manifest, headers={"Content-Type": accept})
    print(f"bigimage: pushed {registry}/{REPO}:{TAG}, layer {digest}, {blob_size} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
