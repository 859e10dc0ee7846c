"""Gate chains on the two-package fixture in tests/fixtures/chain (see its README).

``app`` guards a fused all-reduce that, through callers, a method found by name and a module
alias bound at import time, reaches ``kernlib``'s JIT build filter, whose source includes a
header with three kinds of CUDA gate. The chain must hold the guard, the filter and exactly the
one CUDA gate that compiles code out on sm_120; ``lift --chain`` lifts those three as one.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import jsonschema
import pytest

from conftest import sha256_snapshot
from liftgate.arch.core import Arch
from liftgate.chain import ChainContext, chains_of_gate, listed_chains, view
from liftgate.chain.callgraph import CallGraph
from liftgate.cli.main import main
from liftgate.judge.verdict import judge_scan
from liftgate.model import Gate, GateKind, Report, VerdictKind
from liftgate.report.json_format import load_schema
from liftgate.scan import scan
from liftgate.sources.workspace import Workspace

FIXTURE = Path(__file__).parent / "fixtures" / "chain"
SOURCES = [str(FIXTURE / "app"), str(FIXTURE / "kernlib")]
SM120, SM120A, SM90, SM80 = Arch(12, 0), Arch(12, 0, "a"), Arch(9, 0), Arch(8, 0)


@pytest.fixture(scope="module")
def scanned() -> tuple[Report, Workspace]:
    report = judge_scan(scan(SOURCES, ["sm_120", "sm_90"]))
    assert report.workspace is not None
    return report, report.workspace


def _gate(report: Report, path: str, marker: str) -> Gate:
    """The gate on the line of ``path`` that carries ``marker`` in the fixture."""
    package = path.split("/")[0]
    text = (FIXTURE / package / path).read_text().splitlines()
    (line,) = [n for n, t in enumerate(text, 1) if marker in t]
    # a CUDA gate's marker is the comment line above its #if
    lines = {line, line + 1}
    (gate,) = [g for g in report.gates if g.location.path == path and g.location.line in lines]
    return gate


def test_chain_of_the_guard_reaches_the_filter_and_the_one_cuda_gate(scanned) -> None:  # type: ignore[no-untyped-def]
    report, workspace = scanned
    ctx = ChainContext(report.gates, workspace)
    guard = _gate(report, "app/fusion.py", "# root:")
    build = _gate(report, "kernlib/jit/comm.py", "# link: builds")
    pdl = _gate(report, "kernlib/data/include/kernlib/comm.cuh", "link: compiles out")
    fallback = _gate(report, "kernlib/data/include/kernlib/comm.cuh", "not a link: below sm_80")
    variant = _gate(report, "kernlib/data/include/kernlib/comm.cuh", "not a link for sm_120")
    precondition = _gate(report, "kernlib/comm.py", "a precondition the chain reaches")
    chain = ctx.chain(guard.id)
    relations = {link.gate_id: link.relation for link in chain.links}
    assert relations == {
        guard.id: "root",
        precondition.id: "calls",
        build.id: "builds",
        pdl.id: "compiles",
        variant.id: "compiles",
    }
    assert fallback.id not in relations  # its #else serves every target the build compiles
    link = next(lk for lk in chain.links if lk.gate_id == build.id)
    assert link.via[:2] == (
        "returns to resolve_backend() at app/fusion.py:25",
        "returns to ensure_initialized() at app/fusion.py:34",
    )
    assert (
        "calls create_workspace() at kernlib/comm.py:23 from Manager.initialize() at app/fusion.py:30"
        in link.via
    )
    assert (
        link.via[-1]
        == "calls gen_comm_module() at kernlib/jit/comm.py:6 from get_comm_module() at kernlib/comm.py:12"
    )
    assert not link.exact  # manager.initialize() was resolved by the method's name
    assert not chain.notes

    gates = {g.id: g for g in report.gates}
    verdicts = report.verdict_index()
    for_120 = view(chain, gates, SM120, verdicts)
    assert for_120.required == (guard.id, build.id, pdl.id)
    assert for_120.verdict is VerdictKind.LIFTABLE
    assert len(for_120.covered) == 2 and not for_120.hazards  # the PDL wait compiled out: lifted together
    why = {m.gate.id: m.why_not for m in for_120.members if not m.required}
    assert why[precondition.id] == "already admits sm_120"
    assert why[variant.id].startswith("admits sm_120a: the variant the build compiles decides it")
    assert view(chain, gates, SM90, verdicts).verdict is None  # nothing in it shuts sm_90 out


def test_a_gate_that_leads_nowhere_is_a_chain_of_one_and_is_not_listed(scanned) -> None:  # type: ignore[no-untyped-def]
    report, workspace = scanned
    ctx = ChainContext(report.gates, workspace)
    lonely = _gate(report, "app/fusion.py", "leads nowhere")
    assert ctx.chain(lonely.id).gate_ids == (lonely.id,)
    guard = _gate(report, "app/fusion.py", "# root:")
    build = _gate(report, "kernlib/jit/comm.py", "# link: builds")
    listed = listed_chains(
        [ctx.chain(g.id) for g in (lonely, guard, build)],
        {g.id: g for g in report.gates},
        [SM120],
        report.verdict_index(),
    )
    assert [c.root_id for c in listed] == [guard.id]  # the filter's own chain is inside the guard's


def test_a_chain_blocked_by_its_weakest_link(scanned) -> None:  # type: ignore[no-untyped-def]
    report, workspace = scanned
    guard = _gate(report, "app/fusion.py", "# root:")
    (chain,) = chains_of_gate(guard.id, report.gates, [SM80], workspace)
    sm80 = judge_scan(scan(SOURCES, ["sm_80"]))
    seen = view(chain, {g.id: g for g in sm80.gates}, SM80, sm80.verdict_index())
    assert seen.verdict is VerdictKind.BLOCKED
    pdl = _gate(report, "kernlib/data/include/kernlib/comm.cuh", "link: compiles out")
    assert pdl.id in seen.weakest and "sm_80 lacks griddepcontrol" in seen.reasons[0]


def test_scan_by_chain_in_every_format(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scan", *SOURCES, "-t", "sm_120", "--by", "chain"]) == 0
    out = capsys.readouterr().out
    assert "sm_120: LIFTABLE — 3 gates to lift together; 2 hazards covered by lifting them together" in out
    assert "lift as one: liftgate lift --chain py-" in out
    # the gates of no chain that are losses for sm_120 (comm.cuh's `< 800` path is an alternative)
    assert "1 chain; 2 other listed gates stand alone" in out
    assert main(["scan", *SOURCES, "-t", "sm_120", "--by", "chain", "-f", "json", "-q"]) == 0
    doc = json.loads(capsys.readouterr().out)
    jsonschema.validate(doc, load_schema())
    (chain,) = doc["chains"]
    assert [link["relation"] for link in chain["links"]] == [
        "root",
        "calls",
        "builds",
        "compiles",
        "compiles",
    ]
    (target,) = chain["targets"]
    assert target["verdict"] == "liftable" and len(target["required"]) == 3
    assert main(["scan", *SOURCES, "-t", "sm_120", "--by", "chain", "-f", "markdown", "-q"]) == 0
    markdown = capsys.readouterr().out
    assert "### Chain `py-" in markdown and "| builds |" in markdown


def test_explain_chain_of_a_cuda_gate_names_the_python_root(capsys: pytest.CaptureFixture[str]) -> None:
    report = scan(SOURCES, ["sm_120"])
    pdl = _gate(report, "kernlib/data/include/kernlib/comm.cuh", "link: compiles out")
    guard = _gate(report, "app/fusion.py", "# root:")
    assert main(["explain", pdl.id, *SOURCES, "-t", "sm_120", "--chain", "-f", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [c["root"] for c in doc["chains"]] == [guard.id]
    assert main(["explain", guard.id, *SOURCES, "-t", "sm_120", "--chain"]) == 0
    assert f"chain {guard.id}  app: app/fusion.py:19; builds JIT module comm" in capsys.readouterr().out


def _install(tmp_path: Path, fake_env) -> Path:  # type: ignore[no-untyped-def]
    env = tmp_path / "env"
    fake_env(FIXTURE / "app", "app", "1.0", prefix=env)
    site = fake_env(FIXTURE / "kernlib", "kernlib", "2.0", prefix=env)
    return site


def test_lift_chain_lifts_the_three_gates_as_one_and_reverts(
    tmp_path: Path, fake_env, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    site = _install(tmp_path, fake_env)
    env = str(tmp_path / "env")
    stock = sha256_snapshot(site)
    report = scan([], ["sm_120"], env=env)
    guard = _gate(report, "app/fusion.py", "# root:")
    assert main(["lift", "--chain", guard.id, "--env", env, "-t", "sm_120", "--yes"]) == 0
    err = capsys.readouterr().err
    assert f"chain {guard.id}: 3 gate(s) shut sm_120 out; combined verdict liftable" in err
    lifted = sha256_snapshot(site)
    assert sorted(k for k in stock if stock[k] != lifted[k]) == [
        "app/fusion.py",
        "kernlib/data/include/kernlib/comm.cuh",
        "kernlib/jit/comm.py",
    ]
    again = scan([], ["sm_120"], env=env)
    for path, marker in (
        ("app/fusion.py", "# root:"),
        ("kernlib/jit/comm.py", "# link: builds"),
        ("kernlib/data/include/kernlib/comm.cuh", "link: compiles out"),
    ):
        (gate,) = [
            g
            for g in again.gates
            if g.location.path == path and g.kind is not GateKind.BINARY and marker in _line_text(site, g)
        ]
        assert gate.status(SM120).value == "admitted", path
    ast.parse((site / "app" / "fusion.py").read_text())
    assert main(["revert", "--all", "--env", env]) == 0
    assert sha256_snapshot(site) == stock


def _line_text(site: Path, gate: Gate) -> str:
    lines = (site / gate.location.path).read_text().splitlines()
    return "\n".join(lines[max(0, gate.location.line - 2) : gate.location.line])


def test_lift_chain_refuses_a_blocked_chain_whole(
    tmp_path: Path, fake_env, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    site = _install(tmp_path, fake_env)
    stock = sha256_snapshot(site)
    env = str(tmp_path / "env")
    guard = _gate(scan([], ["sm_80"], env=env), "app/fusion.py", "# root:")
    assert main(["lift", "--chain", guard.id, "--env", env, "-t", "sm_80", "--yes"]) == 1
    assert "is blocked for sm_80 (weakest link" in capsys.readouterr().err
    assert sha256_snapshot(site) == stock
    assert main(["lift", "--chain", guard.id, "py-0", "--env", env, "-t", "sm_80"]) == 2


def test_callgraph_resolution(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from pkg.sub.impl import exported as exported\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "impl.py").write_text(
        "def exported():\n    return helper()\n\n\ndef helper():\n    return 1\n\n\n"
        "class Base:\n    def run(self):\n        return self.step()\n\n    def step(self):\n        return 2\n\n\n"
        "class Child(Base):\n    def __init__(self):\n        self.value = self.run()\n"
    )
    (pkg / "user.py").write_text(
        "import pkg\nfrom .sub import impl as alias\n\nfast = alias.helper\n\n\n"
        "def caller():\n    from pkg.sub.impl import Child\n\n    Child()\n    pkg.exported()\n    fast()\n    return unknown.step()\n"
    )
    files = {("pkg", "1"): {p.relative_to(tmp_path).as_posix(): str(p) for p in pkg.rglob("*.py")}}
    graph = CallGraph(Workspace.from_files(files))
    user = graph.module("pkg.user")
    assert user is not None
    caller = user.function_at(9)
    assert caller is not None and caller.qualname == "caller"
    calls = [(c.callee.qualname, c.exact) for c in graph.callees(caller)]
    assert calls == [("Child.__init__", True), ("exported", True), ("helper", True)]
    impl = graph.module("pkg.sub.impl")
    assert impl is not None
    init = impl.classes["Child"].methods["__init__"]
    assert [c.callee.qualname for c in graph.callees(init)] == ["Base.run"]  # through the base class
    exported = impl.functions[0]
    assert [(c.caller.qualname, c.line) for c in graph.callers(exported)] == [("caller", 11)]
    helper = next(f for f in impl.functions if f.qualname == "helper")
    assert sorted(c.caller.qualname for c in graph.callers(helper)) == ["caller", "exported"]


def test_unparsable_and_deeply_nested_python_never_stops_a_chain(tmp_path: Path) -> None:
    """A file that does not parse, one too deep to walk, one not UTF-8: noted, never a crash."""
    import shutil

    app = tmp_path / "app"
    shutil.copytree(FIXTURE / "app", app)
    (app / "app" / "broken.py").write_text("def f(:\n    pass\n")
    deep = " + ".join(["x"] * 5000)
    (app / "app" / "deep.py").write_text(f"def g(x):\n    return {deep}\n")
    (app / "app" / "latin1.py").write_bytes(b"# caf\xe9\ndef h():\n    return 1\n")
    fusion = app / "app" / "fusion.py"
    fusion.write_text(
        fusion.read_text().replace(
            "    manager.initialize()\n",
            "    manager.initialize()\n    from app import broken, deep, latin1\n"
            "    broken.f()\n    deep.g(1)\n    latin1.h()\n",
        )
    )
    report = scan([str(app), str(FIXTURE / "kernlib")], ["sm_120"])
    assert report.workspace is not None
    guard = _gate(report, "app/fusion.py", "# root:")
    chain = ChainContext(report.gates, report.workspace).chain(guard.id)
    assert len(chain.links) == 5  # the same chain as without the three files
    assert any("could not be parsed" in note for note in chain.notes)
