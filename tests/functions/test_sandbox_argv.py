"""Golden tests: the sandbox command line, flag by flag."""

from actors.functions.languages import Language
from actors.functions.limits import MIB, SandboxLimits
from actors.functions.sandbox import (
    Rlimit,
    Runtimes,
    bwrap_argv,
    launcher_script,
    program_argv,
    rlimits,
    sandbox_argv,
)

LIMITS = SandboxLimits(
    timeout_s=30, cpu_seconds=30, memory_bytes=256 * MIB, processes=64, tmpfs_bytes=16 * MIB
)
WRAPPERS = "/srv/cairn/actors/functions/sandboxed"


def test_bwrap_command_line_is_exactly_the_hardened_one() -> None:
    argv = bwrap_argv(
        ["/usr/bin/python3", "-I", "-S", "-B", "/cairn/run.py"],
        wrappers_host_dir=WRAPPERS,
        limits=LIMITS,
    )
    assert argv == [
        "/usr/bin/bwrap",
        "--unshare-all", "--unshare-user", "--disable-userns",
        "--uid", "65534", "--gid", "65534",
        "--cap-drop", "ALL",
        "--die-with-parent", "--new-session",
        "--hostname", "sandbox",
        "--ro-bind", "/usr", "/usr",
        "--symlink", "usr/lib", "/lib",
        "--symlink", "usr/lib64", "/lib64",
        "--symlink", "usr/bin", "/bin",
        "--proc", "/proc",
        "--dev", "/dev",
        "--perms", "1777", "--size", "16777216", "--tmpfs", "/tmp",
        "--perms", "0700", "--size", "16777216", "--tmpfs", "/home/sandbox",
        "--ro-bind", WRAPPERS, "/cairn",
        "--remount-ro", "/",
        "--remount-ro", "/dev",
        "--chdir", "/home/sandbox",
        "--clearenv",
        "--setenv", "PATH", "/usr/bin:/bin",
        "--setenv", "HOME", "/home/sandbox",
        "--setenv", "LANG", "C.UTF-8",
        "--",
        "/usr/bin/python3", "-I", "-S", "-B", "/cairn/run.py",
    ]  # fmt: skip


def test_no_network_no_host_paths_and_no_environment_are_requested() -> None:
    argv = bwrap_argv(["x"], wrappers_host_dir="/w", limits=LIMITS)
    assert "--share-net" not in argv
    binds = [argv[i + 1] for i, flag in enumerate(argv) if flag in ("--bind", "--ro-bind")]
    assert binds == ["/usr", "/w"]  # nothing else of the host is visible, nothing writable
    assert "--bind" not in argv and "--dev-bind" not in argv
    assert argv.index("--clearenv") < argv.index("--setenv")


def test_programs() -> None:
    runtimes = Runtimes()
    assert program_argv(Language.PYTHON, runtimes, LIMITS) == [
        "/usr/bin/python3", "-I", "-S", "-B", "/cairn/run.py",
    ]  # fmt: skip
    node = ["/usr/bin/node", "--max-old-space-size=192", "/cairn/run.js"]
    assert program_argv(Language.JAVASCRIPT, runtimes, LIMITS) == node
    assert program_argv(Language.TYPESCRIPT, runtimes, LIMITS) == node


def test_rlimits_with_cgroups_leave_memory_and_processes_to_them() -> None:
    expected = [Rlimit("-c", 0), Rlimit("-t", 30), Rlimit("-f", 32768), Rlimit("-n", 256)]
    for language in Language:
        assert rlimits(language, LIMITS, memory_cgroup=True, pids_cgroup=True) == expected


def test_rlimit_fallback_never_limits_address_space_for_node() -> None:
    python = rlimits(Language.PYTHON, LIMITS, memory_cgroup=False, pids_cgroup=False)
    assert Rlimit("-v", 262144) in python and Rlimit("-p", 64) in python
    for language in (Language.JAVASCRIPT, Language.TYPESCRIPT):
        node = rlimits(language, LIMITS, memory_cgroup=False, pids_cgroup=False)
        assert all(limit.flag != "-v" for limit in node)
        assert Rlimit("-p", 64) in node


def test_launcher_enters_cgroups_sets_limits_then_execs() -> None:
    script = launcher_script(
        ["/sys/fs/cgroup/memory/a b/cgroup.procs", "/sys/fs/cgroup/pids/x/cgroup.procs"],
        [Rlimit("-t", 30), Rlimit("-n", 256)],
    )
    assert script == (
        "echo $$ > '/sys/fs/cgroup/memory/a b/cgroup.procs' || exit 125\n"
        "echo $$ > /sys/fs/cgroup/pids/x/cgroup.procs || exit 125\n"
        "ulimit -t 30 || exit 125\n"
        "ulimit -n 256 || exit 125\n"
        "unset PWD OLDPWD\n"
        'exec "$@"'
    )
    assert launcher_script([], []) == 'unset PWD OLDPWD\nexec "$@"'


def test_whole_command_line_passes_bwrap_as_arguments_not_as_script_text() -> None:
    argv = sandbox_argv(
        Language.PYTHON,
        Runtimes(),
        LIMITS,
        wrappers_host_dir=WRAPPERS,
        cgroup_procs=["/cg/cgroup.procs"],
        memory_cgroup=False,
        pids_cgroup=True,
    )
    assert argv[:2] == ["/bin/dash", "-c"]
    limits = rlimits(Language.PYTHON, LIMITS, memory_cgroup=False, pids_cgroup=True)
    assert argv[2] == launcher_script(["/cg/cgroup.procs"], limits)
    assert "ulimit -v 262144 || exit 125" in argv[2]
    assert argv[3:] == [
        "cairn-sandbox",
        *bwrap_argv(program_argv(Language.PYTHON, Runtimes(), LIMITS),
                    wrappers_host_dir=WRAPPERS, limits=LIMITS),
    ]  # fmt: skip
