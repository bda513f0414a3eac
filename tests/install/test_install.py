"""cairn installed the documented way into fresh Debian 12 and 13 roots, then `cairn up`.

docs/deploy.md section 2, as root on a fresh machine: cairn at /opt/cairn, then
`cd /opt/cairn && ops/setup`. The root is a debootstrapped minbase system with systemd, sudo
and python3 (tests.debian_root): no Python venv module, no Node.js, no npm, no compiler;
ops/setup must bring what it needs from Debian's mirror, PyPI and npm. cairn comes either as a
checkout, copied as it stands (tracked and untracked files that git does not ignore: no .venv,
no node_modules, no data), which is what a `git clone` gives once committed; or as the release
tarball `ops/bundle` makes of HEAD, with which the host must need no npm.

Then a smoke test of `cairn up` started as ops/deploy/systemd/cairn.service would start it (as the
user `cairn`, with the unit's environment; no Proxmox configured: the simulated cluster) in a
network namespace of its own: `/health` answers ok, the VM service lists its VMs
over loopback, a Python, a JavaScript and a TypeScript function each run in the sandbox and
return 3, and SIGTERM stops it with status 0. The times and the footprint are printed
(run with `ops/test --install`, which shows them).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.debian_root import DebianRoot, unpack
from tests.debian_root import skip_reason as root_skip_reason

pytestmark = [
    pytest.mark.skipif(root_skip_reason() is not None, reason=str(root_skip_reason())),
    pytest.mark.timeout(3600),
]

REPO = Path(__file__).resolve().parents[2]
HOME = "/opt/cairn"

# Inside the root, in its own network namespace: start as the unit would, wait for /health,
# list, run, stop. @LAUNCH@ is the unit's command line (launch_command).
SMOKE = r"""
set -u
@LAUNCH@ >/tmp/cairn-up.log 2>&1 &
pid=$!
/opt/cairn/.venv/bin/python - "$pid" 2>/tmp/check.err <<'PY'
import json, sys, time, urllib.error, urllib.request
def get(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.load(r)
# The services start one after another: poll until each one asked of answers.
deadline = time.monotonic() + 180
while True:
    try:
        health = get("http://127.0.0.1:8000/health")
        listing = get("http://127.0.0.1:8100/api/vm/list")
        get("http://127.0.0.1:8200/health")
        break
    except OSError as exc:
        if time.monotonic() > deadline:
            sys.exit(f"cairn did not answer within 180 s: {exc}")
        time.sleep(0.5)
# A function in each language, run in the sandbox: Python on Debian's python3, JavaScript on
# Debian's node, TypeScript through esbuild from ops/node_modules.
runs = {}
for language in ("python", "javascript", "typescript"):
    code = "const n: number = 1 + 2; return n" if language == "typescript" else "return 1 + 2"
    body = json.dumps({"language": language, "code": code}).encode()
    ask = urllib.request.Request("http://127.0.0.1:8200/run-now", data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    started = time.monotonic()
    try:
        with urllib.request.urlopen(ask, timeout=120) as r:
            runs[language] = json.load(r)
    except urllib.error.HTTPError as exc:
        runs[language] = {"status": exc.code, "body": exc.read().decode()}
    except OSError as exc:
        runs[language] = {"error": repr(exc)}
    runs[language]["seconds"] = round(time.monotonic() - started, 2)
rss = {}
for line in open("/proc/%s/status" % sys.argv[1]):
    if line.startswith("VmRSS:"):
        rss["cairn"] = int(line.split()[1]) // 1024
print(json.dumps({"health": health, "vm_list": listing, "runs": runs, "rss_mb": rss}))
PY
checked=$?
kill -TERM "$pid"
wait "$pid"
stopped=$?
echo "checked=$checked stopped=$stopped"
[ "$checked" = 0 ] || { tail -n 40 /tmp/cairn-up.log; cat /tmp/check.err; } >&2
"""


def launch_command(unit: str) -> str:
    """What systemd would run for ops/deploy/systemd/cairn.service, as far as a root without a
    running systemd can: its User, WorkingDirectory (the StateDirectory, made as systemd makes it),
    Environment and ExecStart; no EnvironmentFile (no Proxmox configured: the simulator).
    Two lines: the preparation, then the service's command alone, which SMOKE runs in the
    background so that `$!` is cairn itself (setpriv and env exec it)."""
    fields: dict[str, list[str]] = {}
    for line in unit.splitlines():
        key, sep, value = line.partition("=")
        if sep and key in ("User", "WorkingDirectory", "Environment", "ExecStart"):
            fields.setdefault(key, []).append(value)
    user, workdir = fields["User"][0], fields["WorkingDirectory"][0]
    env = " ".join(shlex.join(value.split()) for value in fields["Environment"])
    return (
        f"install -d -m 0700 -o {user} -g {user} {shlex.quote(workdir)} && cd {workdir}\n"
        f"setpriv --reuid={user} --regid={user} --init-groups "
        f"env -i PATH=/usr/local/bin:/usr/bin:/bin {env} {fields['ExecStart'][0]}"
    )


def copy_checkout(dest: Path) -> None:
    """The working tree's files that git tracks or would track, as a clone would have them."""
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout
    present = [p for p in listed.split(b"\0") if p and (REPO / p.decode()).exists()]
    dest.mkdir(parents=True)
    pipe = 'tar -C "$1" --null -T - -cf - | tar -C "$2" -xf -'
    subprocess.run(
        ["bash", "-o", "pipefail", "-c", pipe, "copy", str(REPO), str(dest)],
        input=b"\0".join(present),
        check=True,
    )


# Variables by which pip, Python and Node take extra trusted CAs.
CA_VARIABLES = ("SSL_CERT_FILE", "PIP_CERT", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS")
CA_IN_ROOT = "/usr/local/share/cairn-tests/network-ca.crt"


def network_trust(root: DebianRoot) -> dict[str, str]:
    """The machine running the tests may reach PyPI and npm through a TLS-intercepting proxy
    whose CA it names in SSL_CERT_FILE (and friends). A real host would not need this; the root
    gets that CA file and the variables pointing at it, nothing else of the host."""
    source = next((os.environ[v] for v in CA_VARIABLES if os.environ.get(v)), None)
    if source is None or not Path(source).is_file():
        return {}
    target = root.path / CA_IN_ROOT.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    return dict.fromkeys(CA_VARIABLES, CA_IN_ROOT)


def timed(
    root: DebianRoot, script: str, *, env: dict[str, str], isolated: bool = False
) -> tuple[float, str, str]:
    """Seconds taken, stdout and stderr of a script that must succeed."""
    started = time.monotonic()
    result = root.run(["bash", "-c", script], timeout=3000, env=env, isolated=isolated)
    took = time.monotonic() - started
    out, err = result.stdout.decode(errors="replace"), result.stderr.decode(errors="replace")
    assert result.returncode == 0, f"{script} exited {result.returncode}:\n{out}\n{err[-4000:]}"
    return took, out, err


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The release tarball ops/bundle makes (HEAD plus ops/node_modules), made once."""
    out = tmp_path_factory.mktemp("bundle") / "cairn.tar.gz"
    subprocess.run([str(REPO / "ops/bundle"), str(out)], cwd=REPO, check=True, timeout=900)
    return out


def unpack_bundle(tarball: Path, dest: Path) -> None:
    """docs/deploy.md's way with a release tarball: unpack, move to /opt/cairn."""
    work = dest.parent / "bundle-unpacked"
    work.mkdir()
    subprocess.run(["tar", "-xzf", str(tarball), "-C", str(work)], check=True)
    (top,) = work.iterdir()
    top.rename(dest)
    work.rmdir()


DPKG_STATUS = "dpkg-query -W -f='${db:Status-Status}\\n' %s 2>/dev/null; true"


@pytest.mark.parametrize("source", ["checkout", "bundle"])
@pytest.mark.parametrize("version", ["12", "13"], ids=["debian12", "debian13"])
def test_the_documented_install_runs_cairn(
    version: str, source: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """From a checkout (git clone) or from the release tarball (ops/bundle), which must then
    need no npm on the host."""
    started = time.monotonic()
    root = unpack(version, tmp_path / "root")
    if source == "bundle":
        unpack_bundle(request.getfixturevalue("bundle"), root.path / HOME.lstrip("/"))
    else:
        copy_checkout(root.path / HOME.lstrip("/"))
    status = DPKG_STATUS % "python3-venv nodejs npm"
    assert "installed" not in root.sh(status).split(), "a prerequisite is in the fresh root"
    trust = network_trust(root)
    prepared = time.monotonic() - started

    setup, _, setup_said = timed(root, f"cd {HOME} && ops/setup", env=trust)
    again, _, _ = timed(root, f"cd {HOME} && ops/setup", env=trust)
    npm = root.sh(DPKG_STATUS % "npm").split()
    if source == "bundle":
        assert npm != ["installed"], "the release tarball's install pulled npm in"
    footprint = root.sh(
        f"cd {HOME} && du -sm .venv ops/node_modules 2>/dev/null; "
        "node --version; python3 --version; dpkg-query -W -f='${Version}' nodejs"
    )

    unit = (root.path / HOME.lstrip("/") / "ops/deploy/systemd/cairn.service").read_text()
    smoke_script = SMOKE.replace("@LAUNCH@", launch_command(unit))
    smoke, out, log = timed(root, smoke_script, env={}, isolated=True)
    assert out.splitlines()[-1] == "checked=0 stopped=0", f"{out}\n{log[-4000:]}"
    seen = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
    assert seen["health"]["status"] == "ok", seen
    assert isinstance(seen["vm_list"], list | dict), seen
    for language, result in seen["runs"].items():
        assert result.get("data") == 3, (language, result)

    print(
        f"\ninstall debian{version} from the {source}: unpack+copy {prepared:.0f} s, "
        f"ops/setup {setup:.0f} s, "
        f"ops/setup again {again:.1f} s, cairn up smoke {smoke:.0f} s, "
        f"cairn's RSS after the runs {seen['rss_mb'].get('cairn')} MB, npm {npm}\n"
        f"footprint (MB, path):\n{footprint}\nops/setup said:\n{setup_said[-1500:]}"
    )
