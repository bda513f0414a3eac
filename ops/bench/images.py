#!/usr/bin/env python3
"""Benchmark of the image service against nginx and bare Pillow, measured in one run.

1. Reads: requests per second for a ~200 KB JPEG served as the original and as a cached
   variant, at concurrency 16 (wrk), against nginx (one worker) serving the same file from the
   same directory. Target: cached variant >= 0.25x nginx.
2. Resize: median time of a first-time resize of a 12-megapixel JPEG to 800 px (WebP), through
   the service over HTTP, against the same work done by Pillow alone in this process.
   Target: within 1.2x the bare library.

Sets itself up: installs nginx (Debian ``nginx-light``) and wrk with apt-get when they are
missing, starts nginx and ``cairn serve images`` on free loopback ports in a temp dir, and
removes everything at the end. Usage: ``.venv/bin/python ops/bench/images.py [--seconds 5]``.
"""

from __future__ import annotations

import argparse
import io
import os
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from PIL import Image, ImageDraw, ImageFilter

ROOT = Path(__file__).resolve().parents[2]
CONCURRENCY = 16
RESIZE_RUNS = 7
TARGET_WIDTH = 800
QUALITY = 80


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ensure_tools() -> None:
    missing = [pkg for tool, pkg in (("nginx", "nginx-light"), ("wrk", "wrk")) if not _which(tool)]
    if not missing:
        return
    print(f"installing {', '.join(missing)} with apt-get", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "install", "-y", "-qq", *missing], check=True, env=env)


def _which(tool: str) -> str | None:
    return shutil.which(tool) or shutil.which(tool, path="/usr/sbin:/sbin")


def photo_like(size: tuple[int, int], seed: int = 1) -> Image.Image:
    """Smooth shapes plus fine noise: compresses like a photo, not like a flat test card."""
    rnd = random.Random(seed)
    im = Image.new("RGB", size, (120, 140, 160))
    draw = ImageDraw.Draw(im)
    for _ in range(60):
        x, y = rnd.randrange(size[0]), rnd.randrange(size[1])
        r = rnd.randrange(size[0] // 20, size[0] // 4)
        color = (rnd.randrange(256), rnd.randrange(256), rnd.randrange(256))
        draw.ellipse((x - r, y - r, x + r, y + r), fill=color)
    im = im.filter(ImageFilter.GaussianBlur(size[0] / 200))
    noise = Image.effect_noise(size, 40).convert("RGB")
    return Image.blend(im, noise, 0.12)


def jpeg_bytes(im: Image.Image, quality: int) -> bytes:
    out = io.BytesIO()
    im.save(out, "JPEG", quality=quality)
    return out.getvalue()


def make_200k_jpeg() -> bytes:
    im = photo_like((1000, 750))
    for quality in range(95, 40, -5):
        data = jpeg_bytes(im, quality)
        if len(data) <= 210_000:
            return data
    return data


@contextmanager
def nginx(root: Path, workdir: Path) -> Iterator[int]:
    port = free_port()
    conf = workdir / "nginx.conf"
    conf.write_text(
        f"""
worker_processes 1;
daemon off;
user root;
pid {workdir}/nginx.pid;
error_log {workdir}/nginx-error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 1000000;
    types {{ image/jpeg jpg; }}
    client_body_temp_path {workdir}/nginx-body;
    proxy_temp_path {workdir}/nginx-proxy;
    fastcgi_temp_path {workdir}/nginx-fastcgi;
    uwsgi_temp_path {workdir}/nginx-uwsgi;
    scgi_temp_path {workdir}/nginx-scgi;
    server {{
        listen 127.0.0.1:{port};
        location /c/img/ {{ alias {root}/; }}
    }}
}}
"""
    )
    proc = subprocess.Popen([_which("nginx") or "nginx", "-c", str(conf), "-p", str(workdir)])
    with _answering(proc, f"http://127.0.0.1:{port}/c/img/bench.jpg", grace=10):
        yield port


@contextmanager
def _answering(proc: subprocess.Popen[bytes], url: str, grace: float) -> Iterator[None]:
    """The server `proc` once it answers `url`, stopped on the way out however the run ends."""
    try:
        wait_http(url, proc)
        yield
    finally:
        proc.terminate()
        proc.wait(grace)


@contextmanager
def image_service(data: Path) -> Iterator[int]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "NATS_URL"}
    env |= {"CAIRN_DATA": str(data), "PORT": str(port), "PYTHONPATH": str(ROOT)}
    with open(data.parent / "service.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway.main", "serve", "images"],
            cwd=data.parent,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        with _answering(proc, f"http://127.0.0.1:{port}/check/state", grace=20):
            yield port


def wait_http(url: str, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode} before answering {url}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"no answer from {url} within {timeout:.0f}s")


def wrk(url: str, seconds: int, accept: str = "*/*") -> tuple[float, str, str]:
    """Requests/s, median and p99 latency of ``url`` at concurrency 16."""
    cmd = [
        _which("wrk") or "wrk",
        "-t2",
        f"-c{CONCURRENCY}",
        f"-d{seconds}s",
        "--latency",
        "-H",
        f"Accept: {accept}",
        url,
    ]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    p50 = re.search(r"^\s+50%\s+(\S+)", out, re.M).group(1)  # type: ignore[union-attr]
    p99 = re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1)  # type: ignore[union-attr]
    if re.search(r"Non-2xx or 3xx responses", out):
        raise SystemExit(f"wrk saw errors for {url}:\n{out}")
    return rps, p50, p99


def fetch(url: str, accept: str) -> tuple[float, bytes, str]:
    request = urllib.request.Request(url, headers={"Accept": accept})
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=60) as resp:
        body = resp.read()
        ctype = resp.headers["Content-Type"]
    return time.perf_counter() - start, body, ctype


def bare_pillow(path: Path) -> float:
    """What the service does for the first request of a variant, with Pillow alone."""
    start = time.perf_counter()
    with Image.open(path) as im:
        want = (TARGET_WIDTH, round(im.height * TARGET_WIDTH / im.width))
        im.draft("RGB", (want[0] * 2, want[1] * 2))
        small = im.convert("RGB").resize(want, Image.Resampling.LANCZOS, reducing_gap=2.0)
        out = io.BytesIO()
        small.save(out, "WEBP", quality=QUALITY)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=5, help="duration of each wrk run")
    args = parser.parse_args()
    ensure_tools()
    with tempfile.TemporaryDirectory(prefix="cairn-bench-images-") as tmp:
        work = Path(tmp)
        work.chmod(0o755)
        data = work / "data"
        store = data / "images" / "store"
        store.mkdir(parents=True)
        small = make_200k_jpeg()
        (store / "bench.jpg").write_bytes(small)
        big = jpeg_bytes(photo_like((4000, 3000), seed=2), 90)
        for i in range(RESIZE_RUNS):
            (store / f"big{i}.jpg").write_bytes(big)
        print(f"files: {len(small) / 1000:.0f} KB JPEG; 12 MP JPEG of {len(big) / 1e6:.1f} MB")

        with image_service(data) as port, nginx(store, work) as nginx_port:
            base = f"http://127.0.0.1:{port}/c/img"
            variant = f"{base}/bench.jpg?w=640"
            _, body, ctype = fetch(variant, "image/webp,*/*")  # render it once
            print(f"cached variant: {ctype}, {len(body) / 1000:.0f} KB")

            print(f"\nreads at concurrency {CONCURRENCY}, {args.seconds} s each (wrk):")
            rows = {
                "nginx, original": wrk(
                    f"http://127.0.0.1:{nginx_port}/c/img/bench.jpg", args.seconds
                ),
                "cairn, original": wrk(f"{base}/bench.jpg", args.seconds),
                "cairn, cached variant": wrk(variant, args.seconds, "image/webp,*/*"),
            }
            nginx_rps = rows["nginx, original"][0]
            for name, (rps, p50, p99) in rows.items():
                print(
                    f"  {name:<24} {rps:>9.0f} req/s  p50 {p50:>8}  p99 {p99:>8}"
                    f"  {rps / nginx_rps:5.2f}x nginx"
                )

            print(f"\nfirst-time resize of a 12 MP JPEG to {TARGET_WIDTH} px WebP:")
            service_times, pillow_times = [], []
            bare_pillow(store / "big0.jpg")  # warm the page cache and Pillow's imports
            for i in range(RESIZE_RUNS):
                # interleaved, so background load hits both sides alike
                seconds, body, ctype = fetch(f"{base}/big{i}.jpg?w={TARGET_WIDTH}", "image/webp")
                assert ctype == "image/webp", ctype
                service_times.append(seconds)
                pillow_times.append(bare_pillow(store / f"big{i}.jpg"))
            svc = statistics.median(service_times)
            bare = statistics.median(pillow_times)
            for name, times in (("cairn over HTTP", service_times), ("Pillow alone", pillow_times)):
                median, worst = statistics.median(times) * 1000, max(times) * 1000
                print(
                    f"  {name:<16}  median {median:6.1f} ms  max {worst:6.1f} ms  (n={len(times)})"
                )

        cached_ratio = rows["cairn, cached variant"][0] / nginx_rps
        resize_ratio = svc / bare
        ok_cached = cached_ratio >= 0.25
        ok_resize = resize_ratio <= 1.2
        print("\ntargets:")
        verdict = {True: "met", False: "MISSED"}
        print(f"  cached reads {cached_ratio:.2f}x nginx (>= 0.25x): {verdict[ok_cached]}")
        print(f"  resize {resize_ratio:.2f}x bare Pillow (<= 1.2x): {verdict[ok_resize]}")
        return 0 if ok_cached and ok_resize else 1


if __name__ == "__main__":
    raise SystemExit(main())
