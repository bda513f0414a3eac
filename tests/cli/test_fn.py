"""`cairn fn` against a running cairn: store, list, run (plain and streamed), remove; the
result on stdout as data, failures on stderr with exit 1, paths sent as they are."""

from __future__ import annotations

from pathlib import Path

from tests.cli.conftest import Cairn

ADD = """total = sum(event["numbers"])
print("adding", len(event["numbers"]))
return {"total": total}
"""


def test_put_list_run_and_remove(cairn: Cairn, tmp_path: Path) -> None:
    code = tmp_path / "add.py"
    code.write_text(ADD)
    put = cairn.run("fn", "put", "cli/add", str(code))
    assert put.code == 0, put
    assert put.out.startswith("stored cli/add: version ") and put.out.endswith(" UTC, python)\n")

    listed = cairn.run("fn", "list")
    assert listed.code == 0
    header, *rows = listed.out.splitlines()
    assert header.split() == ["PATH", "LANGUAGE", "LATEST", "VERSIONS"]
    row = next(r.split() for r in rows if r.startswith("cli/add "))
    assert row[1] == "python" and row[-1] == "1" and row[-2] == "UTC"
    entry = next(
        f for f in cairn.run("fn", "list", "--json").json()["functions"] if f["path"] == "cli/add"
    )
    assert entry["language"] == "python" and len(entry["versions"]) == 1

    # What the function prints comes on stderr without asking; the result alone on stdout.
    run = cairn.run("fn", "run", "cli/add", "--input", '{"numbers": [1, 2, 39]}')
    assert (run.code, run.out, run.err) == (0, '{"total": 42}\n', "adding 3\n")
    as_json = cairn.run("fn", "run", "cli/add", "--input", '{"numbers": [2]}', "--json")
    assert as_json.json() == {"data": {"total": 2}, "type": "json", "logs": ["adding 1"]}

    streamed = cairn.program("fn", "run", "cli/add", "--input", '{"numbers": [5, 5]}', "--stream")
    assert streamed.code == 0, streamed
    assert (streamed.out, streamed.err) == ('{"total": 10}\n', "adding 2\n")
    streamed_json = cairn.run(
        "fn", "run", "cli/add", "--input", '{"numbers": [1]}', "--stream", "--json"
    )
    assert streamed_json.json() == {"data": {"total": 1}, "type": "json", "logs": ["adding 1"]}

    removed = cairn.run("fn", "rm", "cli/add")
    assert (removed.code, removed.out) == (0, "removed cli/add (1 version)\n")
    gone = cairn.run("fn", "run", "cli/add", "--input", "{}")
    assert (gone.code, gone.out, gone.err) == (1, "", "cairn: script not found\n")


def test_a_new_version_says_what_it_replaced(cairn: Cairn, tmp_path: Path) -> None:
    first, second = tmp_path / "v1.py", tmp_path / "v2.js"
    first.write_text("return 'one'\n")
    second.write_text("return 'two';\n")
    assert cairn.run("fn", "put", "cli/swap", str(first)).code == 0
    again = cairn.run("fn", "put", "cli/swap", str(second), "--json")
    assert again.code == 0
    doc = again.json()
    assert doc["replaced"] is True and doc["language"] == "javascript"
    assert doc["previous"]["language"] == "python"
    assert again.err == "cairn: cli/swap was python; its new version is javascript\n"
    # A string result is printed as it is, for $(…).
    plain = cairn.run("fn", "run", "cli/swap")
    assert (plain.code, plain.out) == (0, "two\n")
    old = cairn.run("fn", "run", "cli/swap", "--version", str(doc["previous"]["version"]))
    assert (old.code, old.out) == (0, "one\n")


def test_a_failing_run_exits_1_with_its_error(cairn: Cairn, tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("print('before')\nreturn 1 / 0\n")
    assert cairn.run("fn", "put", "cli/bad", str(bad)).code == 0
    plain = cairn.program("fn", "run", "cli/bad")
    assert plain.code == 1 and plain.out == ""
    assert plain.err.startswith("before\nTraceback (most recent call last):\n")
    assert plain.err.endswith("\ncairn: failed to run: ZeroDivisionError: division by zero\n")
    streamed = cairn.run("fn", "run", "cli/bad", "--stream", "--json")
    assert streamed.code == 1
    assert streamed.err.startswith("before\nTraceback (most recent call last):\n")
    assert streamed.err.endswith("\ncairn: failed to run: ZeroDivisionError: division by zero\n")
    assert streamed.json()["exit"] == 1


def test_paths_are_sent_as_they_are_never_as_a_query(cairn: Cairn, tmp_path: Path) -> None:
    code = tmp_path / "odd.py"
    code.write_text("return 'odd'\n")
    path = "cli/odd dir/a?b=c#d%41"
    put = cairn.run("fn", "put", path, str(code), "--json")
    assert put.code == 0, put
    assert put.json()["path"] == path
    assert cairn.run("fn", "run", path).out == "odd\n"
    assert path in [f["path"] for f in cairn.run("fn", "list", "--json").json()["functions"]]
    assert cairn.run("fn", "rm", path).code == 0
    # `..` is the service's to refuse, and it does, before anything is stored.
    climb = cairn.run("fn", "put", "cli/../../etc/x", str(code))
    assert (climb.code, climb.err) == (1, "cairn: Invalid path\n")


def test_bad_local_input_is_a_usage_error(cairn: Cairn, tmp_path: Path) -> None:
    unknown = cairn.run("fn", "put", "cli/x", str(tmp_path / "x.rb"))
    assert unknown.code == 2 and "cannot tell the language of" in unknown.err
    missing = cairn.run("fn", "put", "cli/x", str(tmp_path / "missing.py"))
    assert missing.code == 2 and "no such file or directory" in missing.err
    not_json = cairn.run("fn", "run", "cli/x", "--input", "{nope")
    assert not_json.code == 2 and "the input is not JSON" in not_json.err
