"""Golden tests: the sandbox command line, flag by flag."""

import attrs
import pytest

from actors.functions.languages import Language
from actors.functions.limits import MIB, SandboxLimits
from actors.functions.sandbox import (
    Descriptors,
    HostUser,
    Program,
    Rlimit,
    Runtimes,
    bwrap_argv,
    drop_argv,
    esbuild_program,
    launcher_script,
    program_for,
    rlimits,
    sandbox_argv,
)

LIMITS = SandboxLimits(
    timeout_s=30, cpu_seconds=31, memory_bytes=256 * MIB, processes=64, tmpfs_bytes=16 * MIB
)
PYTHON = program_for(Language.PYTHON, Runtimes(), LIMITS)
ESBUILD = esbuild_program("/srv/cairn/ops/node_modules/esbuild", ["--loader=ts"])
USER = HostUser(999, 995)


def test_bwrap_command_line_is_exactly_the_hardened_one() -> None:
    argv = bwrap_argv(PYTHON, Descriptors(files=(5, 6, 7), seccomp=8), limits=LIMITS)
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
        "--remount-ro", "/proc",
        "--dev", "/dev",
        "--perms", "1777", "--size", "16777216", "--tmpfs", "/tmp",
        "--perms", "0700", "--size", "16777216", "--tmpfs", "/home/sandbox",
        "--ro-bind-data", "5", "/cairn/run.py",
        "--ro-bind-data", "6", "/etc/passwd",
        "--ro-bind-data", "7", "/etc/group",
        "--remount-ro", "/",
        "--remount-ro", "/dev",
        "--chdir", "/home/sandbox",
        "--clearenv",
        "--setenv", "PATH", "/usr/bin:/bin",
        "--setenv", "HOME", "/home/sandbox",
        "--setenv", "LANG", "C.UTF-8",
        "--seccomp", "8",
        "--",
        "/usr/bin/python3", "-I", "-S", "-B", "/cairn/run.py",
    ]  # fmt: skip


def test_no_network_no_host_paths_no_sys_and_no_environment_are_requested() -> None:
    for program, given in [
        (PYTHON, Descriptors(files=(5, 6, 7), seccomp=8)),
        (ESBUILD, Descriptors(executable=6, seccomp=8)),
    ]:
        argv = bwrap_argv(program, given, limits=LIMITS)
        assert "--share-net" not in argv
        binds = [argv[i + 1] for i, flag in enumerate(argv) if flag in ("--bind", "--ro-bind")]
        assert binds == ["/usr"]  # nothing else of the host is visible, nothing writable
        assert "--bind" not in argv and "--dev-bind" not in argv
        assert not any("/srv/cairn" in arg or "/sys" in arg for arg in argv)
        assert argv.index("--clearenv") < argv.index("--setenv")


def test_esbuild_runs_from_its_descriptor() -> None:
    argv = bwrap_argv(ESBUILD, Descriptors(executable=6, seccomp=8), limits=LIMITS)
    assert argv[-5:] == ["--seccomp", "8", "--", "/proc/self/fd/6", "--loader=ts"]


def test_each_file_needs_its_descriptor() -> None:
    with pytest.raises(ValueError):
        bwrap_argv(PYTHON, Descriptors(seccomp=8), limits=LIMITS)
    with pytest.raises(ValueError):
        bwrap_argv(ESBUILD, Descriptors(seccomp=8), limits=LIMITS)


def test_programs() -> None:
    runtimes = Runtimes()
    assert PYTHON.argv == ("/usr/bin/python3", "-I", "-S", "-B", "/cairn/run.py")
    assert PYTHON.files == ("/cairn/run.py", "/etc/passwd", "/etc/group")
    node = ("/usr/bin/node", "--max-old-space-size=192", "/cairn/run.js")
    assert program_for(Language.JAVASCRIPT, runtimes, LIMITS).argv == node
    assert program_for(Language.TYPESCRIPT, runtimes, LIMITS).argv == node
    assert program_for(Language.TYPESCRIPT, runtimes, LIMITS).files[0] == "/cairn/run.js"


def test_the_switch_to_the_sandbox_user() -> None:
    assert drop_argv(USER, "/usr/bin/setpriv") == [
        "/usr/bin/setpriv",
        "--reuid=999",
        "--regid=995",
        "--clear-groups",
        "--no-new-privs",
        "--",
    ]
    assert drop_argv(None, "/usr/bin/setpriv") == []  # cairn is not root: it cannot switch


CPU = Rlimit("-t", 31, 32)


def with_cgroups(program: Program) -> list[Rlimit]:
    return rlimits(program, LIMITS, memory_cgroup=True)


def without_cgroups(program: Program) -> list[Rlimit]:
    return rlimits(program, LIMITS, memory_cgroup=False)


def test_rlimits_with_cgroups_leave_memory_and_processes_to_them() -> None:
    expected = [Rlimit("-c", 0), CPU, Rlimit("-f", 32768), Rlimit("-n", 256)]
    for language in Language:
        assert with_cgroups(program_for(language, Runtimes(), LIMITS)) == expected
    assert with_cgroups(ESBUILD) == expected


def test_rlimit_fallback_never_limits_address_space_for_node_or_go() -> None:
    python = without_cgroups(PYTHON)
    assert Rlimit("-v", 262144) in python
    for language in (Language.JAVASCRIPT, Language.TYPESCRIPT):
        node = without_cgroups(program_for(language, Runtimes(), LIMITS))
        assert Rlimit("-d", 262144) in node and all(limit.flag != "-v" for limit in node)
        # node does not boot under 32 MiB of RLIMIT_DATA: never less than 64 MiB.
        tiny = attrs.evolve(LIMITS, memory_bytes=16 * MIB)
        small = rlimits(program_for(language, Runtimes(), tiny), tiny, memory_cgroup=False)
        assert Rlimit("-d", 64 * 1024) in small
    # Go reserves ~70 MiB of writable address space up front: RLIMIT_DATA leaves it room.
    assert Rlimit("-d", (256 + 80) * 1024) in without_cgroups(ESBUILD)
    # Processes are capped per run inside the sandbox, never for the whole host user here.
    assert all(limit.flag != "-p" for limit in [*python, *without_cgroups(ESBUILD)])


def test_without_a_pids_cgroup_the_run_caps_its_processes_inside() -> None:
    given = Descriptors(files=(5, 6, 7), seccomp=8)
    argv = bwrap_argv(PYTHON, given, limits=LIMITS, inner_processes=63)
    end = argv.index("--")
    assert argv[end + 1 :] == [
        "/bin/dash", "-c", 'ulimit -p 63 || exit 125\nexec "$@"', "sandbox",
        "/usr/bin/python3", "-I", "-S", "-B", "/cairn/run.py",
    ]  # fmt: skip
    assert argv[:end] == bwrap_argv(PYTHON, given, limits=LIMITS)[:end]
    # The launcher's bwrap counts as the run's 64th process.
    whole = sandbox_argv(
        PYTHON,
        Runtimes(),
        LIMITS,
        user=USER,
        given=given,
        cgroup_procs=[],
        memory_cgroup=False,
        pids_cgroup=False,
    )
    assert whole[-9:] == argv[-9:]


def test_launcher_enters_cgroups_sets_limits_then_execs() -> None:
    script = launcher_script(
        ["/sys/fs/cgroup/memory/a b/cgroup.procs", "/sys/fs/cgroup/pids/x/cgroup.procs"],
        [Rlimit("-t", 30, 31), Rlimit("-n", 256)],
    )
    assert script == (
        "echo $$ > '/sys/fs/cgroup/memory/a b/cgroup.procs' || exit 125\n"
        "echo $$ > /sys/fs/cgroup/pids/x/cgroup.procs || exit 125\n"
        "ulimit -S -t 30 || exit 125\n"
        "ulimit -H -t 31 || exit 125\n"
        "ulimit -n 256 || exit 125\n"
        "unset PWD OLDPWD\n"
        'exec "$@"'
    )
    assert launcher_script([], []) == 'unset PWD OLDPWD\nexec "$@"'


def test_whole_command_line_passes_the_rest_as_arguments_not_as_script_text() -> None:
    given = Descriptors(files=(5, 6, 7), seccomp=8)
    argv = sandbox_argv(
        PYTHON,
        Runtimes(),
        LIMITS,
        user=USER,
        given=given,
        cgroup_procs=["/cg/cgroup.procs"],
        memory_cgroup=False,
        pids_cgroup=True,
    )
    assert argv[:2] == ["/bin/dash", "-c"]
    limits = rlimits(PYTHON, LIMITS, memory_cgroup=False)
    assert argv[2] == launcher_script(["/cg/cgroup.procs"], limits)
    assert "ulimit -v 262144 || exit 125" in argv[2]
    # The cgroup entry and the rlimits need the server's rights; then the user switch, then
    # bwrap: no process of the sandbox itself is ever root.
    assert argv[3:] == [
        "cairn-sandbox",
        *drop_argv(USER, "/usr/bin/setpriv"),
        *bwrap_argv(PYTHON, given, limits=LIMITS),
    ]
