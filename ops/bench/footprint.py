"""The install's footprint, measured as a new user gets it (issue 32's targets: .venv + caches
<= 500 MB, service RSS idle with search <= 300 MB).

    .venv/bin/python ops/bench/footprint.py [--clone DIR] [--settle 40]

Clones this repository's HEAD into DIR (default: a temporary directory), runs the plain
`ops/setup` there with a HOME of its own (so pip's and npm's caches are counted, not shared),
then starts `cairn up` from the clone with a fresh data directory laid out as the systemd unit
lays it out, waits `--settle` seconds after ready (search indexes a small inbox and loads its
model), and reads the memory of cairn and of everything it started. Then again with
CAIRN_SERVICES=vm,functions. Prints one JSON object; sizes in MB (du, 1 MB = 2^20 bytes).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def du_mb(path: Path) -> float:
    if not path.exists():
        return 0.0
    out = subprocess.run(["du", "-sk", str(path)], capture_output=True, text=True, check=True)
    return round(int(out.stdout.split()[0]) / 1024, 1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def memory_kb(pid: int, field: str) -> int:
    source = "status" if field == "VmRSS" else "smaps_rollup"
    for line in Path(f"/proc/{pid}/{source}").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def descendants(root: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [], [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent]
        found += children
        frontier += children
    return found


def run_cairn(clone: Path, data: Path, settle: float, **extra: str) -> dict[str, object]:
    (data / "inbox" / "notes").mkdir(parents=True, exist_ok=True)
    (data / "inbox" / "notes" / "a.md").write_text("# Hello\n\nProxmox clusters and cairn.\n")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CAIRN_", "NATS_", "VIRTUAL_ENV", "SEARCH_", "PVE_", "EMBEDDING_"))
        # Written under the unit's PYTHONPYCACHEPREFIX, as the service does.
        and k != "PYTHONDONTWRITEBYTECODE"
    }
    env.update(
        {k: str(free_port()) for k in ("CAIRN_PORT", "VM_PORT", "FUNCTIONS_PORT", "IMAGES_PORT")}
    )
    env.update(
        CAIRN_DATA=str(data),
        XDG_CACHE_HOME=str(data / "cache"),
        XDG_CONFIG_HOME=str(data / "config"),
        SEARCH_INBOX=str(data / "inbox"),
        HOME=str(data),
        PYTHONPYCACHEPREFIX=str(data / "cache" / "python"),
        **extra,
    )
    proc = subprocess.Popen(
        [str(clone / ".venv" / "bin" / "cairn"), "up"],
        cwd=data,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    started = time.monotonic()
    for line in proc.stdout:
        if "cairn: ready" in line:
            break
    else:
        raise SystemExit("cairn exited before it was ready")
    ready = time.monotonic() - started
    time.sleep(settle)
    kids = descendants(proc.pid)
    by_name: dict[str, list[int]] = {}
    for pid in kids:
        try:
            name = Path(f"/proc/{pid}/comm").read_text().strip()
            by_name.setdefault(name, []).append(memory_kb(pid, "Pss"))
        except OSError:
            continue
    maps = Path(f"/proc/{proc.pid}/maps").read_text()
    result: dict[str, object] = {
        "ready_s": round(ready, 1),
        "cairn_rss_mb": round(memory_kb(proc.pid, "VmRSS") / 1024),
        "cairn_pss_mb": round(memory_kb(proc.pid, "Pss") / 1024),
        "children_pss_mb": {k: [len(v), round(sum(v) / 1024)] for k, v in sorted(by_name.items())},
        "tree_pss_mb": round(
            (memory_kb(proc.pid, "Pss") + sum(sum(v) for v in by_name.values())) / 1024
        ),
        "onnxruntime_loaded": "onnxruntime" in maps,
        # Bytecode (PYTHONPYCACHEPREFIX) and the model's runtime files (SEARCH_MODEL_CACHE).
        "data_cache_mb": round(du_mb(data / "cache") + du_mb(data / "search" / "models"), 1),
    }
    proc.terminate()
    proc.wait(60)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clone", type=Path)
    parser.add_argument("--settle", type=float, default=40.0)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="cairn-footprint-"))
    clone = args.clone or work / "cairn"
    home = work / "home"
    home.mkdir()
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("VIRTUAL_ENV")}
    env["HOME"] = str(home)
    started = time.monotonic()
    subprocess.run([str(clone / "ops" / "setup")], env=env, check=True)
    setup_s = time.monotonic() - started
    disk = {
        "venv_mb": du_mb(clone / ".venv"),
        "home_caches_mb": du_mb(home),
        "node_modules_mb": du_mb(clone / "ops" / "node_modules"),
    }
    every = run_cairn(clone, work / "data-all", args.settle)
    # The first start builds the model files and bytecode; a restart only loads them.
    again = run_cairn(clone, work / "data-all", args.settle)
    vm_only = run_cairn(clone, work / "data-vm", args.settle / 4, CAIRN_SERVICES="vm,functions")
    total = disk["venv_mb"] + disk["home_caches_mb"] + float(every["data_cache_mb"])  # type: ignore[arg-type]
    print(
        json.dumps(
            {
                "measured": "plain ops/setup on a fresh clone, then cairn up idle",
                "python": sys.version.split()[0],
                "setup_s": round(setup_s),
                **disk,
                "venv_plus_caches_mb": round(total, 1),
                "every_service_first_start": every,
                "every_service_restart": again,
                "vm_and_functions": vm_only,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
