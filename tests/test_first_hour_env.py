"""What a new user hits in the first hour with environments: an editable install scanned as what it
installs (never its tests and fixtures), ``--env`` given a file, and ``doctor`` asking torch in an
environment whose torch warns on import.

Every environment here is fake and built in ``tmp_path``: a site-packages with a dist-info, and,
where an interpreter is needed, a virtual environment made by hand (``pyvenv.cfg`` and a link to
the base interpreter), so nothing is installed and nothing leaves the machine.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from liftgate.cli.main import main
from liftgate.doctor import PROBE_MARK, marked_answer, torch_checks
from liftgate.sources import resolve_sources
from liftgate.sources.environment import find_site_packages, resolve_site_packages
from liftgate.sources.interface import SourceError

GATE = b"#if __CUDA_ARCH__ >= 900\n__global__ void k() {}\n#endif\n"
SITE = f"lib/python{sys.version_info[0]}.{sys.version_info[1]}/site-packages"


def make_venv(prefix: Path) -> Path:
    """A virtual environment at ``prefix`` made by hand: its ``bin/python`` is the base interpreter
    under a ``pyvenv.cfg``, so it runs with ``sys.prefix == prefix`` and its own site-packages.
    Returns that site-packages."""
    base = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    (prefix / "bin").mkdir(parents=True, exist_ok=True)
    (prefix / "pyvenv.cfg").write_text(
        f"home = {os.path.dirname(base)}\ninclude-system-site-packages = false\n"
    )
    (prefix / "bin" / "python").symlink_to(base)
    site = prefix / SITE
    site.mkdir(parents=True, exist_ok=True)
    return site


# --- an editable install is what it installs -----------------------------------------------------


def make_checkout(root: Path, layout: str = "src") -> Path:
    """A project whose package is ``src/pkg`` (or ``pkg`` at the root, ``layout="flat"``), beside a
    ``tests/fixtures/`` full of gates that are no part of the installed package."""
    package = root / "src" / "pkg" if layout == "src" else root / "pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "kernel.cuh").write_bytes(GATE)
    fixtures = root / "tests" / "fixtures"
    fixtures.mkdir(parents=True)
    (root / "tests" / "__init__.py").write_text("")
    (root / "tests" / "test_pkg.py").write_text("import pkg\n")
    (fixtures / "fixture_gate.cuh").write_bytes(GATE)
    (root / "examples").mkdir()
    (root / "examples" / "demo.cu").write_bytes(GATE)
    (root / "setup.py").write_text("raise SystemExit('never run')\n")
    return root


def editable_dist(site: Path, project: Path, record: dict[str, str]) -> None:
    """A PEP 660 editable ``pkg 1.0`` in ``site``: its dist-info with a ``direct_url.json`` naming
    ``project``, and ``record``'s files (name → text) written to site-packages and listed in RECORD."""
    dist = site / "pkg-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\n\n")
    (dist / "direct_url.json").write_text(
        json.dumps({"url": project.as_uri(), "dir_info": {"editable": True}})
    )
    for name, text in record.items():
        (site / name).write_text(text)
    rows = [
        *record,
        "pkg-1.0.dist-info/METADATA",
        "pkg-1.0.dist-info/direct_url.json",
        "pkg-1.0.dist-info/RECORD",
    ]
    (dist / "RECORD").write_text("".join(f"{row},,\n" for row in rows))


def package_paths(site: Path) -> set[str]:
    [package], _skips = resolve_site_packages(str(site))
    assert package.name == "pkg"
    return {f.path for f in package.files}


def test_editable_setuptools_finder_scans_its_mapping_and_never_runs_the_finder(tmp_path: Path) -> None:
    project = make_checkout(tmp_path / "checkout")
    site = tmp_path / "env" / SITE
    site.mkdir(parents=True)
    ran = tmp_path / "the-finder-ran"
    finder = (
        f"open({str(ran)!r}, 'w').close()\n"  # would leave a trace if anything imported or ran it
        "import sys\n"
        f"MAPPING: dict[str, str] = {{'pkg': {str(project / 'src' / 'pkg')!r}}}\n"
        "NAMESPACES: dict[str, list[str]] = {}\n"
        "def install():\n    sys.meta_path.append(None)\n"
    )
    editable_dist(
        site,
        project,
        {
            "__editable__.pkg-1.0.pth": "import __editable___pkg_1_0_finder; __editable___pkg_1_0_finder.install()",
            "__editable___pkg_1_0_finder.py": finder,
        },
    )
    paths = package_paths(site)
    assert {"src/pkg/__init__.py", "src/pkg/kernel.cuh", "__editable___pkg_1_0_finder.py"} <= paths
    assert not any(p.startswith(("tests/", "examples/")) or p == "setup.py" for p in paths), paths
    assert not ran.exists(), "the finder was executed"
    kernel = next(f for f in resolve_site_packages(str(site))[0][0].files if f.path == "src/pkg/kernel.cuh")
    assert kernel.fspath == str(project / "src" / "pkg" / "kernel.cuh")


def test_editable_mapping_outside_its_project_is_a_skip_never_listed(tmp_path: Path) -> None:
    project = make_checkout(tmp_path / "checkout")
    elsewhere = tmp_path / "home" / "secrets"
    elsewhere.mkdir(parents=True)
    (elsewhere / "key.py").write_text("TOKEN = 1\n")
    site = tmp_path / "env" / SITE
    site.mkdir(parents=True)
    mapping = {"pkg": str(project / "src" / "pkg"), "other": str(elsewhere), "sysfs": "/proc"}
    editable_dist(site, project, {"__editable___pkg_1_0_finder.py": f"MAPPING = {mapping!r}\n"})
    [package], skips = resolve_site_packages(str(site))
    paths = {f.path for f in package.files}
    assert "src/pkg/kernel.cuh" in paths
    assert not any("key.py" in p or p.startswith("/proc") for p in paths), paths
    outside = {s.path for s in skips if "outside its project" in s.reason}
    assert outside == {str(elsewhere), "/proc"}


def test_editable_hatchling_pth_scans_the_packages_of_its_source_root(tmp_path: Path) -> None:
    """hatchling's default editable: a .pth naming the source root (as this repository's .venv has it)."""
    project = make_checkout(tmp_path / "checkout")
    (project / "pyproject.toml").write_text(
        '[project]\nname = "pkg"\nversion = "1.0"\n\n[tool.hatch.build.targets.wheel]\npackages = ["src/pkg"]\n'
    )
    (project / "src" / "pkg.egg-info").mkdir()  # a build leftover, not importable
    (project / "src" / "pkg.egg-info" / "PKG-INFO").write_text("Name: pkg\n")
    site = tmp_path / "env" / SITE
    site.mkdir(parents=True)
    editable_dist(site, project, {"_editable_impl_pkg.pth": str(project / "src")})
    paths = package_paths(site)
    assert {"src/pkg/__init__.py", "src/pkg/kernel.cuh", "_editable_impl_pkg.pth"} <= paths
    assert not any(p.startswith(("tests/", "examples/", "src/pkg.egg-info")) for p in paths), paths

    # The same without a build configuration: the packages the source root holds.
    (project / "pyproject.toml").unlink()
    assert "src/pkg/kernel.cuh" in package_paths(site)


def test_editable_flat_layout_pth_at_the_project_root_leaves_tests_out(tmp_path: Path) -> None:
    """A .pth naming the project root itself (a flat layout): only real packages, never tests/."""
    project = make_checkout(tmp_path / "checkout", layout="flat")
    site = tmp_path / "env" / SITE
    site.mkdir(parents=True)
    editable_dist(site, project, {"_pkg.pth": str(project) + "\n"})
    paths = package_paths(site)
    assert {"pkg/__init__.py", "pkg/kernel.cuh"} <= paths
    assert not any(p.startswith(("tests/", "examples/")) or p == "setup.py" for p in paths), paths


def test_editable_without_a_hook_uses_the_src_layout(tmp_path: Path) -> None:
    project = make_checkout(tmp_path / "checkout")
    site = tmp_path / "env" / SITE
    site.mkdir(parents=True)
    editable_dist(site, project, {})
    paths = package_paths(site)
    assert "src/pkg/kernel.cuh" in paths
    assert not any(p.startswith("tests/") for p in paths), paths


def test_this_repository_installed_editable_lists_no_tests() -> None:
    """liftgate's own dev install (hatchling, editable): scanning this environment shows no test fixture."""
    packages, _skips = resolve_sources([])
    mine = [p for p in packages if p.name == "liftgate"]
    if not mine or not any(f.path.endswith(".pth") for f in mine[0].files):
        pytest.skip("liftgate is not installed editable here")
    paths = {f.path for f in mine[0].files}
    assert any(p.endswith("liftgate/scan/run.py") for p in paths)
    assert not any(p.startswith("tests/") or "/fixtures/" in p for p in paths)


# --- --env names a file -----------------------------------------------------------------------


def test_env_that_is_a_file_says_so_and_what_to_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LIFTGATE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    lone = tmp_path / "requirements.txt"
    lone.write_text("torch\n")
    with pytest.raises(SourceError) as caught:
        find_site_packages(str(lone))
    message = str(caught.value)
    assert message.startswith(f"{lone} is a file, not an environment directory; pass a virtualenv")
    assert "no such environment" not in message and "\n" not in message

    site = make_venv(tmp_path / "venv")
    assert site.is_dir()
    with pytest.raises(SourceError, match=r"is an interpreter, not an environment directory; pass its "):
        resolve_sources([], env=str(tmp_path / "venv" / "bin" / "python"))

    assert main(["doctor", "-t", "sm_120", "--env", str(lone)]) == 2
    err = capsys.readouterr().err
    assert "is a file, not an environment directory" in err and "no such environment" not in err
    assert main(["scan", "-t", "sm_120", "-q", "--env", str(lone)]) == 2
    assert "is a file, not an environment directory" in capsys.readouterr().err


# --- doctor asks torch through a marked line ----------------------------------------------------


FAKE_TORCH = """
import sys, warnings
print("hello from a package that prints on import")
sys.stderr.write("UserWarning: CUDA initialization: no NVIDIA driver on your system\\n")
warnings.warn("a warning on import")
__version__ = "2.9.0+cu128"
from . import version, cuda, _C
"""


def fake_torch(site: Path) -> None:
    torch = site / "torch"
    torch.mkdir(parents=True)
    (torch / "__init__.py").write_text(FAKE_TORCH)
    (torch / "version.py").write_text("cuda = '12.8'\n")
    (torch / "cuda.py").write_text(
        "def get_arch_list():\n    return []  # no GPU here: the real one says so\n"
    )
    (torch / "_C.py").write_text("def _cuda_getArchFlags():\n    return 'sm_80 sm_90 sm_100 sm_120'\n")


def test_torch_that_warns_on_import_is_read_from_the_marked_line(tmp_path: Path) -> None:
    site = make_venv(tmp_path / "venv")
    fake_torch(site)
    checks = torch_checks(str(tmp_path / "venv" / "bin" / "python"))
    assert [(c.item, c.verdict, c.value) for c in checks] == [
        ("torch", "ok", "2.9.0+cu128 (CUDA 12.8)"),
        ("arch list", "info", "sm_80 sm_90 sm_100 sm_120"),
    ]


def test_doctor_env_reports_torch_installed_despite_its_warnings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    site = make_venv(tmp_path / "venv")
    fake_torch(site)
    assert main(["doctor", "-t", "sm_90", "--env", str(tmp_path / "venv"), "--format", "json"]) in (0, 1)
    checks = json.loads(capsys.readouterr().out)["checks"]
    torch = {c["item"]: c for c in checks if c["section"] == "torch"}
    assert torch["torch"]["value"] == "2.9.0+cu128 (CUDA 12.8)"
    assert torch["arch list"]["value"] == "sm_80 sm_90 sm_100 sm_120"


def test_torch_not_installed_broken_or_unaskable(tmp_path: Path) -> None:
    site = make_venv(tmp_path / "venv")
    python = str(tmp_path / "venv" / "bin" / "python")
    [missing] = torch_checks(python)
    assert (missing.verdict, missing.value) == ("info", "not installed")

    (site / "torch").mkdir()
    (site / "torch" / "__init__.py").write_text(
        "raise ImportError('libcudart.so.12: cannot open shared object file')\n"
    )
    [broken] = torch_checks(python)
    assert broken.verdict == "warn"
    assert broken.value == (
        "installed, but importing it fails (ImportError: libcudart.so.12: cannot open shared object file)"
    )

    script = tmp_path / "not-python"
    script.write_text("#!/bin/sh\necho 'no marked line'\necho 'it broke' >&2\nexit 3\n")
    script.chmod(0o755)
    [unaskable] = torch_checks(str(script))
    assert (unaskable.verdict, unaskable.value) == ("warn", "could not be asked (exit status 3: it broke)")


def test_marked_answer_takes_only_the_marked_line() -> None:
    assert marked_answer(f'{{"x": 1}}\n{PROBE_MARK}{{"installed": false}}\nnoise\n') == {"installed": False}
    assert marked_answer('{"installed": true}\n') is None
    assert marked_answer(f"{PROBE_MARK}not json\n") is None
