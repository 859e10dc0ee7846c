"""``liftgate trace`` and ``liftgate scan --trace`` on the synthetic package in tests/fixtures/trace.

The fixture's gates call torch.cuda, vLLM's platform, NVML, Triton and CuPy through stand-ins at
the real module paths (``fakes/``) that, like the real ones on a machine without a GPU, raise when
asked about a device. Under ``--as`` the tracer answers instead, so no GPU is needed: each query
is mapped to its static gate, the probes say which way each condition went, and the query made
from a file the scan does not include is listed as such.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from liftgate.cli.main import main
from liftgate.model import Report, TraceSummary
from liftgate.scan import scan
from liftgate.trace.document import TraceError, load_schema, load_trace, merge, trace_from_dict
from liftgate.trace.match import map_trace
from liftgate.trace.session import SITECUSTOMIZE, prepare

FIXTURE = Path(__file__).parent / "fixtures" / "trace"
PACKAGE = FIXTURE / "tracepkg"
FAKES = FIXTURE / "fakes"
PROGRAM = FIXTURE / "run_tracepkg.py"


def _gate_lines() -> dict[str, list[int]]:
    """Lines marked ``# gate`` in the fixture, per package path (what the scan must find)."""
    marked: dict[str, list[int]] = {}
    for path in sorted((PACKAGE / "tracepkg").glob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if "# gate:" in line:
                marked.setdefault(f"tracepkg/{path.name}", []).append(number)
    return marked


@pytest.fixture
def traced_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The fakes and the package on PYTHONPATH, as a user's environment would have them."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(FAKES), str(PACKAGE)]))
    monkeypatch.setenv("LIFTGATE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _trace(tmp: Path, *options: str, args: tuple[str, ...] = ()) -> tuple[int, Path]:
    out = tmp / f"trace{len(list(tmp.glob('trace*.json')))}.json"
    code = main(
        [
            "trace",
            "-q",
            "--source",
            str(PACKAGE),
            *options,
            "-o",
            str(out),
            "--",
            sys.executable,
            str(PROGRAM),
            *args,
        ]
    )
    return code, out


def _scan(trace_file: Path, *targets: str) -> Report:
    return map_trace(scan([str(PACKAGE)], list(targets) or ["sm_120"]), load_trace(str(trace_file)))


def _by_line(report: Report) -> dict[tuple[str, int], str]:
    return {(g.location.path, g.location.line): g.id for g in report.gates}


def test_as_sm120_maps_every_query_to_its_gate(traced_env: Path) -> None:
    code, out = _trace(traced_env, "--as", "rtx5090")
    assert code == 0
    doc = json.loads(out.read_text())
    jsonschema.validate(doc, load_schema())
    assert doc["as"] == {"arch": "sm_120", "capability": [12, 0], "device_name": "NVIDIA GeForce RTX 5090"}
    apis = {q["api"] for q in doc["queries"]}
    assert apis == {
        "torch.cuda.get_device_capability",
        "torch.cuda.get_device_name",
        "vllm.platforms.Platform.has_device_capability",
        "triton.runtime.driver.active.get_current_target",
        "pynvml.nvmlDeviceGetCudaComputeCapability",
    }  # CuPy's Device.compute_capability is a compiled property: never wrapped, only probed
    assert all(q["as"] for q in doc["queries"]), "every answer under --as is marked"
    # vLLM's has_device_capability asks its own get_device_capability: one query, the outer one
    assert not any(q["api"].endswith("NvmlCudaPlatform.get_device_capability") for q in doc["queries"])

    report = _scan(out)
    trace = report.trace
    assert isinstance(trace, TraceSummary)
    expected = _gate_lines()
    ids = _by_line(report)
    assert sorted(ids) == sorted((path, line) for path, lines in expected.items() for line in lines)
    traced = {g.gate_id: g for g in trace.gates}
    assert set(traced) == set(ids.values()), "every gate of the fixture ran under --as sm_120"
    ops = "tracepkg/ops.py"
    guard = traced[ids[(ops, 13)]]  # if not (is_sm90() or sm_version() >= 100): raise
    assert guard.outcomes == (("past", 1),) and guard.took == "admitted"
    assert guard.queries == ("torch.cuda.get_device_capability → (12, 0) (--as)",)
    attention = traced[ids[(ops, 19)]]  # if sm_version() >= 120 … else
    assert attention.outcomes == (("then", 1),) and attention.took == "admitted"
    assert attention.agreement is not None and attention.agreement.startswith("agrees")
    # Triton's target goes through a variable: the query's line is in the gate's evidence
    triton = traced[ids[(ops, 33)]]
    assert triton.queries == (
        "triton.runtime.driver.active.get_current_target → {backend='cuda', arch=120, warp_size=32} (--as)",
    )
    assert traced[ids[(ops, 41)]].queries == ("pynvml.nvmlDeviceGetCudaComputeCapability → (12, 0) (--as)",)
    cupy = traced[ids[(ops, 47)]]  # the stand-in raises like CuPy without a GPU: --as cannot answer it
    assert cupy.outcomes == (("raised", 1),) and not cupy.queries
    assert any("cupy.cuda.Device.compute_capability is not traced" in n for n in trace.notes)
    # is_sm90() is lru_cached: its one query came through the guard at ops.py:13, and the helper's
    # own `return … == 9` gate (excluded for 12.0) ran once
    helper = traced[ids[("tracepkg/caps.py", 10)]]
    assert helper.outcomes == (("evaluated", 1),)

    untraced = {(u.api, u.reason) for u in trace.untraced}
    assert untraced == {
        ("torch.cuda.get_device_name", "in a scanned file, but no gate there"),
        ("torch.cuda.get_device_capability", "not in the scanned files"),
    }
    script = next(u for u in trace.untraced if u.reason == "not in the scanned files")
    assert script.site.path == str(PROGRAM) and script.site.package is None
    describe = next(u for u in trace.untraced if u.api == "torch.cuda.get_device_name")
    assert (describe.site.package, describe.site.package_path, describe.site.line) == ("tracepkg", ops, 53)
    assert trace.queries == 8 and trace.matched_queries == 6


def test_as_sm90_takes_the_other_sides(traced_env: Path) -> None:
    code, out = _trace(traced_env, "--as", "sm_90")
    assert code == 0
    report = _scan(out, "sm_90")
    ids = _by_line(report)
    traced = {g.gate_id: g for g in report.trace.gates}  # type: ignore[union-attr]
    attention = traced[ids[("tracepkg/ops.py", 19)]]
    assert attention.outcomes == (("else", 1),) and attention.took == "excluded"
    assert (
        attention.agreement
        == "agrees: the scan says excluded for 9.0 (--as sm_90), and the run took the excluded side"
    )
    nvml = traced[ids[("tracepkg/ops.py", 41)]]
    assert nvml.outcomes == (("past", 1),) and nvml.took == "admitted"  # a guard passed


def test_without_as_the_real_answers_are_recorded_even_when_they_raise(traced_env: Path) -> None:
    code, out = _trace(traced_env)
    assert code == 0  # the program catches the errors
    doc = json.loads(out.read_text())
    assert doc["as"] is None
    errors = {q["api"]: q["error"] for q in doc["queries"]}
    assert errors["torch.cuda.get_device_capability"] == "_NoDevice: Found no NVIDIA driver on your system."
    assert errors["pynvml.nvmlDeviceGetCudaComputeCapability"] == "NVMLError: Driver Not Loaded"
    assert not any(q["as"] for q in doc["queries"])
    report = _scan(out)
    ids = _by_line(report)
    traced = {g.gate_id: g for g in report.trace.gates}  # type: ignore[union-attr]
    assert traced[ids[("tracepkg/ops.py", 19)]].outcomes == (("raised", 1),)
    triton = traced[ids[("tracepkg/ops.py", 33)]]
    assert triton.evaluations == 0 and triton.queried == 1  # the query raised before the condition


def test_child_processes_are_traced_and_merged(traced_env: Path) -> None:
    code, out = _trace(traced_env, "--as", "sm_120", args=("--child",))
    assert code == 0
    trace = load_trace(str(out))
    assert len(trace.processes) == 2
    parent, child = sorted(trace.processes, key=lambda p: p.ppid != os.getpid())
    assert child.ppid == parent.pid
    # The same query from the same place in two processes is one record, counted twice.
    name = next(q for q in trace.queries if q.api == "torch.cuda.get_device_name")
    assert name.count == 2 and len(name.pids) == 2
    report = _scan(out)
    attention = report.trace.for_gate(_by_line(report)[("tracepkg/ops.py", 19)])  # type: ignore[union-attr]
    assert attention is not None and attention.outcomes == (("then", 2),)


def test_failing_command_still_writes_its_trace(traced_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = traced_env / "crash.py"
    script.write_text("import torch\ntorch.cuda.get_device_capability()\n")
    out = traced_env / "crash.json"
    code = main(["trace", "--no-probes", "-o", str(out), "--", sys.executable, str(script)])
    assert code == 1
    trace = load_trace(str(out))
    assert trace.exit_code == 1
    (query,) = trace.queries
    assert query.error is not None and query.stack[0].line == 2
    assert "exited with 1 (the trace is written all the same)" in capsys.readouterr().err


def test_a_query_from_a_wrong_place_is_named_with_its_caller(traced_env: Path) -> None:
    code, out = _trace(traced_env, "--as", "sm_120")
    assert code == 0
    report = _scan(out)
    assert report.trace is not None
    (describe,) = [u for u in report.trace.untraced if u.api == "torch.cuda.get_device_name"]
    assert describe.caller is not None and describe.caller.path == str(PROGRAM)


def test_scan_cli_shows_traced_gates_in_every_format(
    traced_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = _trace(traced_env, "--as", "sm_120")
    assert code == 0
    capsys.readouterr()
    assert (
        main(["scan", str(PACKAGE), "-t", "sm_120", "--trace", str(out), "--show", "traced", "--no-judge"])
        == 0
    )
    table = capsys.readouterr()
    text = " ".join(table.out.split())  # the table wraps long cells
    assert "traced: ran 1×, took the admitted side (then 1)" in text
    assert "not in the scanned files" in text
    assert "trace: 7 gates evaluated, 2 of 8 capability queries from a place with no gate" in table.err
    assert main(["scan", str(PACKAGE), "-t", "sm_120", "--trace", str(out), "-f", "json", "-q"]) == 0
    doc = json.loads(capsys.readouterr().out)
    from liftgate.report.json_format import load_schema as report_schema

    jsonschema.validate(doc, report_schema())
    assert doc["trace"]["as"] == "sm_120" and doc["trace"]["gates_evaluated"] == 7
    assert [g["trace"]["took"] for g in doc["gates"]] == ["unknown"]  # caps.py:10, a return
    assert main(["scan", str(PACKAGE), "-t", "sm_120", "--trace", str(out), "-f", "markdown", "-q"]) == 0
    markdown = capsys.readouterr().out
    assert "| traced run |" in markdown and "not in the scanned files" in markdown
    assert main(["scan", str(PACKAGE), "-t", "sm_120", "--trace", str(out), "-f", "sarif", "-q"]) == 0
    sarif = json.loads(capsys.readouterr().out)
    assert sarif["runs"][0]["properties"]["trace"]["untraced"]


def test_existing_sitecustomize_still_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    marker = tmp_path / "marker"
    (theirs / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    monkeypatch.setenv("PYTHONPATH", str(theirs))
    out = tmp_path / "t.json"
    assert main(["trace", "-q", "--no-probes", "-o", str(out), "--", sys.executable, "-c", "pass"]) == 0
    assert marker.read_text() == "ran"
    assert len(load_trace(str(out)).processes) == 1


def test_python_run_isolated_is_reported_not_silently_empty(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "t.json"
    assert main(["trace", "--no-probes", "-o", str(out), "--", sys.executable, "-I", "-c", "pass"]) == 0
    assert "no Python process reported" in capsys.readouterr().err


def test_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trace", "--no-probes"]) == 2
    assert "no command to trace" in capsys.readouterr().err
    assert main(["trace", "--no-probes", "--as", "sm_999", "--", "true"]) == 2
    assert (
        main(["trace", "--no-probes", "-o", str(tmp_path / "t.json"), "--", str(tmp_path / "missing")]) == 2
    )
    assert "cannot run" in capsys.readouterr().err
    assert main(["scan", str(PACKAGE), "-t", "sm_120", "--show", "traced"]) == 2
    assert "--show traced needs --trace" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text('{"gates": []}')
    assert main(["scan", str(PACKAGE), "-t", "sm_120", "--trace", str(bad)]) == 2
    assert "is not a liftgate trace" in capsys.readouterr().err
    with pytest.raises(TraceError, match="not JSON"):
        bad.write_text("{")
        load_trace(str(bad))
    with pytest.raises(TraceError, match="schema 9"):
        trace_from_dict({"schema_version": "9", "queries": []}, "x.json")


def test_merge_skips_damaged_lines_and_merges_processes(tmp_path: Path) -> None:
    query = {
        "type": "query",
        "id": 1,
        "api": "torch.cuda.get_device_capability",
        "args": "",
        "answer": [9, 0],
        "as": False,
        "stack": [["/x/a.py", 3, "f", "cap = torch.cuda.get_device_capability()"]],
    }
    for pid in (10, 11):
        lines = [
            json.dumps({"type": "process", "pid": pid, "ppid": 1, "argv": [], "sys_path": []}),
            json.dumps(query),
            json.dumps({"type": "count", "id": 1, "count": 5}),
        ]
        (tmp_path / f"trace-{pid}.jsonl").write_text("\n".join(lines) + '\n{"type": "que')
    trace = merge(sorted(str(p) for p in tmp_path.glob("*.jsonl")), command=["x"], exit_code=0, as_arch=None)
    (merged,) = trace.queries
    assert merged.count == 10 and merged.pids == (10, 11)
    assert any("2 damaged line(s)" in n for n in trace.notes)
    jsonschema.validate(trace.to_dict(), load_schema())


def test_the_injected_runtime_needs_no_liftgate(tmp_path: Path) -> None:
    """The traced interpreter may not have liftgate: the injected files import only the standard library."""
    inject = prepare(str(tmp_path))
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": inject, "LIFTGATE_TRACE_DIR": str(tmp_path)}
    code = "import sys; assert 'liftgate' not in sys.modules; import _liftgate_trace_runtime as r; assert r._TRACER"
    subprocess.run([sys.executable, "-S", "-c", f"import sitecustomize; {code}"], env=env, check=True)
    assert "import liftgate" not in SITECUSTOMIZE


def test_real_torch_cpu_build_answers_under_as(tmp_path: Path) -> None:
    """With a real (CPU) torch installed, --as answers get_device_capability and synthesises properties."""
    pytest.importorskip("torch")
    script = tmp_path / "probe.py"
    script.write_text(
        "import torch\n"
        "print(torch.cuda.get_device_capability())\n"
        "p = torch.cuda.get_device_properties(0)\n"
        "print(p.major, p.minor, p.name, p.shared_memory_per_block_optin)\n"
    )
    out = tmp_path / "t.json"
    proc = subprocess.run(
        [sys.executable, "-m", "liftgate", "trace", "-q", "--no-probes", "--as", "sm_120", "-o", str(out), "--",
         sys.executable, str(script)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert proc.stdout.splitlines() == ["(12, 0)", "12 0 NVIDIA GeForce RTX 5090 101376"]
    apis = [q.api for q in load_trace(str(out)).queries]
    assert apis.count("torch.cuda.get_device_capability") == 1 and "torch.cuda.get_device_properties" in apis


def test_a_shared_query_helper_feeds_only_the_predicate_that_called_it(tmp_path: Path) -> None:
    """FlashInfer's utils.py: one helper queries the capability for every is_smXX_supported();
    a query made for is_hopper() must not mark is_blackwell(), whose evidence names the same line."""
    pkg = tmp_path / "helpers"
    pkg.mkdir()
    source = (
        "import torch\n\n\n"
        "def capability():\n    return torch.cuda.get_device_capability()\n\n\n"
        "def is_hopper():\n    major, _ = capability()\n    return major == 9\n\n\n"
        "def is_blackwell():\n    major, _ = capability()\n    return major == 10\n"
    )
    (pkg / "utils.py").write_text(source)
    report = scan([str(pkg)], ["sm_90"])
    by_line = {g.location.line: g.id for g in report.gates}
    assert set(by_line) == {10, 15}
    fs = str(pkg / "utils.py")
    doc = {
        "schema_version": "1",
        "command": ["python", "x.py"],
        "queries": [
            {
                "api": "torch.cuda.get_device_capability",
                "answer": [9, 0],
                "stack": [[fs, 5, "capability", ""], [fs, 9, "is_hopper", ""], ["/x.py", 1, "<module>", ""]],
            }
        ],
    }
    report = map_trace(scan([str(pkg)], ["sm_90"]), trace_from_dict(doc))
    assert report.trace is not None
    assert [g.gate_id for g in report.trace.gates] == [by_line[10]]


def _interpreters() -> list[str]:
    """Other CPython versions on this machine (pyenv's, or on PATH): the injected tracer must run
    on whichever Python the traced command uses (sys.monitoring from 3.12, sys.settrace before)."""
    import glob
    import shutil

    found: dict[str, str] = {}
    candidates = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.*/bin/python3")))
    candidates += [p for v in ("3.9", "3.10", "3.12", "3.13") if (p := shutil.which(f"python{v}"))]
    for path in candidates:
        try:
            out = subprocess.run(
                [path, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                capture_output=True, text=True, timeout=30, check=True,
            ).stdout.strip()  # fmt: skip
        except (OSError, subprocess.SubprocessError):
            continue
        if out != "{}.{}".format(*sys.version_info[:2]) and tuple(map(int, out.split("."))) >= (3, 9):
            found.setdefault(out, path)
    return [found[v] for v in sorted(found, key=lambda v: tuple(map(int, v.split("."))))]


@pytest.mark.parametrize(
    "python", _interpreters() or [pytest.param("", marks=pytest.mark.skip("no other CPython"))]
)
def test_the_same_trace_under_other_pythons(traced_env: Path, python: str) -> None:
    out = traced_env / "t.json"
    assert (
        main(
            [
                "trace",
                "-q",
                "--source",
                str(PACKAGE),
                "--as",
                "sm_120",
                "-o",
                str(out),
                "--",
                python,
                str(PROGRAM),
            ]
        )
        == 0
    )
    report = _scan(out)
    assert report.trace is not None
    ids = _by_line(report)
    outcomes = {g.gate_id: g.outcomes for g in report.trace.gates}
    assert outcomes[ids[("tracepkg/ops.py", 13)]] == (("past", 1),)
    assert outcomes[ids[("tracepkg/ops.py", 19)]] == (("then", 1),)
    assert outcomes[ids[("tracepkg/ops.py", 47)]] == (("raised", 1),)
    assert len(report.trace.gates) == 7 and report.trace.queries == 8


def test_probe_limit_stops_a_hot_gate_and_says_its_count_is_a_lower_bound(traced_env: Path) -> None:
    loop = traced_env / "loop.py"
    loop.write_text("from tracepkg import ops\n\nfor _ in range(50):\n    ops.attention()\n")
    out = traced_env / "t.json"
    code = main(
        ["trace", "-q", "--source", str(PACKAGE), "--as", "sm_120", "--probe-limit", "5", "-o", str(out), "--",
         sys.executable, str(loop)]
    )  # fmt: skip
    assert code == 0
    trace = load_trace(str(out))
    report = _scan(out)
    gate_id = _by_line(report)[("tracepkg/ops.py", 19)]
    assert gate_id in trace.limited
    traced = report.trace.for_gate(gate_id)  # type: ignore[union-attr]
    assert traced is not None and traced.limited and traced.outcomes == (("then", 5),)
    from liftgate.report.select import trace_text

    assert trace_text(traced).startswith("ran ≥5×, took the admitted side")
    assert main(["trace", "--probe-limit", "0", "--", sys.executable, "-c", "pass"]) == 2


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@given(
    st.dictionaries(
        st.sampled_from(
            ["schema_version", "queries", "probes", "processes", "as", "command", "limited", "notes"]
        ),
        _json,
    )
)
@settings(max_examples=300, deadline=None)
def test_a_damaged_trace_document_is_a_trace_error_never_a_crash(doc: dict[str, object]) -> None:
    doc.setdefault("schema_version", "1")
    try:
        trace_from_dict(doc, "fuzz.json")
    except TraceError as exc:
        assert "fuzz.json" in str(exc)


def test_usage_shows_the_command_after_two_dashes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as shown:
        main(["trace", "--help"])
    assert shown.value.code == 0
    usage = capsys.readouterr().out.split("\n\n")[0]
    assert usage.startswith("usage: liftgate trace [-h]") and usage.endswith("-- COMMAND [ARGS…]")
    assert "--source SOURCE" in usage, "the options are still listed"
    with pytest.raises(SystemExit):
        main(["trace", "--probe-limit", "many"])
    assert "-- COMMAND [ARGS…]" in capsys.readouterr().err


def _probed_env(tmp_path: Path) -> Path:
    """A virtual environment (its own bin/python) with the fixture package installed in it."""
    from conftest import install_fake
    from test_first_hour_env import make_venv

    prefix = tmp_path / "venv"
    install_fake(prefix, PACKAGE, "tracepkg", "1.0")
    make_venv(prefix)
    return prefix


def test_nothing_probed_suggests_env_only_for_another_prefix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command runs no gate of the probed environment: ``--env PREFIX`` is suggested when its
    Python runs from another prefix, never when --env already is that prefix."""
    monkeypatch.setenv("LIFTGATE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.chdir(tmp_path)
    prefix = _probed_env(tmp_path)

    out = tmp_path / "same.json"
    argv = ["trace", "-q", "--env", str(prefix), "-o", str(out), "--"]
    assert main([*argv, str(prefix / "bin" / "python"), "-c", "pass"]) == 0
    trace = load_trace(str(out))
    assert trace.probed_gates > 0 and not trace.probes
    assert [p.prefix for p in trace.processes] == [str(prefix)]
    [note] = trace.notes
    assert note.startswith(f"no gate probed in {prefix} ran: the command's Python runs from that environment")
    assert "--env" not in note and "--source" in note

    out = tmp_path / "other.json"
    argv = ["trace", "-q", "--env", str(prefix), "-o", str(out), "--"]
    assert main([*argv, sys.executable, "-c", "pass"]) == 0
    [note] = load_trace(str(out)).notes
    assert f"runs from {sys.prefix}, so pass --env {sys.prefix} to probe the packages installed there" in note
