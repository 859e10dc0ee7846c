"""The README's safety promise, "liftgate never imports or executes the code it scans, and never
installs what it downloads", held against a package built to catch it: every file that could run
(an ``__init__``, ``setup.py``, a ``.pth`` hook, ``sitecustomize``, ``conftest``, a CMake
``execute_process``, a shebang script) writes a marker when executed. Scanning it as a tree, a
wheel, an sdist and an installed environment leaves no marker and still reports its gates.
(Fetching from an index without running pip's build is tests/test_never_execute.py.)
"""

from __future__ import annotations

import json
import os
import stat
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from liftgate.cli.main import main


def _hostile_tree(root: Path, marker: Path) -> Path:
    tree = root / "evilpkg_src"
    pkg = tree / "evilpkg"
    pkg.mkdir(parents=True)
    touch = f"open({str(marker)!r}, 'a').write(__file__ + '\\n')\n"
    (pkg / "__init__.py").write_text(
        touch + "import torch\nif torch.cuda.get_device_capability() >= (9, 0):\n    USE_SM90 = True\n"
    )
    (pkg / "sitecustomize.py").write_text(touch)
    (pkg / "conftest.py").write_text(touch)
    (pkg / "kernel.cu").write_text(
        "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900\n__global__ void k() {}\n#endif\n"
    )
    script = pkg / "run.py"
    script.write_text("#!/usr/bin/env python3\n" + touch)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    (tree / "setup.py").write_text(touch + "from setuptools import setup\nsetup(name='evilpkg')\n")
    (tree / "CMakeLists.txt").write_text(
        f'execute_process(COMMAND touch "{marker}")\n'
        'set(CUDA_ARCHS "8.0;9.0")\ncuda_archs_loose_intersection(SM90_ARCHS "9.0a" "${CUDA_ARCHS}")\n'
    )
    (tree / "evil.pth").write_text(f"import os; open({str(marker)!r}, 'a').write('pth\\n')\n")
    return tree


def _scan_json(*argv: str) -> dict[str, object]:
    out = Path(os.environ["LIFTGATE_TEST_OUT"])
    code = main(["scan", *argv, "-t", "sm_120", "-f", "json", "-o", str(out), "--no-judge", "--show", "all"])
    assert code in (0, 1)
    doc: dict[str, object] = json.loads(out.read_text())
    return doc


def _gate_paths(doc: dict[str, object]) -> set[str]:
    gates = doc["gates"]
    assert isinstance(gates, list)
    return {g["path"] for g in gates}


@pytest.fixture
def hostile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    marker = tmp_path / "EXECUTED"
    monkeypatch.setenv("LIFTGATE_TEST_OUT", str(tmp_path / "report.json"))
    monkeypatch.setenv("LIFTGATE_CACHE_DIR", str(tmp_path / "cache"))
    return _hostile_tree(tmp_path, marker), marker


def _wheel(tree: Path, dest: Path) -> Path:
    wheel = dest / "evilpkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path in sorted(tree.rglob("*")):
            if path.is_file():
                zf.write(path, path.relative_to(tree).as_posix())
        zf.writestr("evilpkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: evilpkg\nVersion: 1.0\n")
        zf.writestr(
            "evilpkg-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        zf.writestr("evilpkg-1.0.dist-info/RECORD", "")
    return wheel


def _sdist(tree: Path, dest: Path) -> Path:
    sdist = dest / "evilpkg-1.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as tf:
        tf.add(tree, arcname="evilpkg-1.0")
        info = tarfile.TarInfo("evilpkg-1.0/PKG-INFO")
        data = b"Metadata-Version: 2.1\nName: evilpkg\nVersion: 1.0\n"
        info.size = len(data)
        import io

        tf.addfile(info, io.BytesIO(data))
    return sdist


@pytest.mark.parametrize("form", ["tree", "wheel", "sdist", "environment"])
def test_scanning_never_imports_or_executes_the_package(
    hostile: tuple[Path, Path], tmp_path: Path, form: str, fake_env: Callable[..., Path]
) -> None:
    tree, marker = hostile
    if form == "tree":
        doc = _scan_json(str(tree))
    elif form == "wheel":
        doc = _scan_json(str(_wheel(tree, tmp_path)))
    elif form == "sdist":
        doc = _scan_json(str(_sdist(tree, tmp_path)))
    else:
        site = fake_env(tree, "evilpkg", "1.0", prefix=tmp_path / "venv")
        doc = _scan_json("--env", str(site))
    assert not marker.exists(), marker.read_text()
    paths = _gate_paths(doc)
    # The package was really read: its CUDA gate (and the Python gate in __init__) are reported.
    assert any(p.endswith("kernel.cu") for p in paths), paths
    assert any(p.endswith("evilpkg/__init__.py") for p in paths), paths


def test_scanning_never_installs_what_it_reads(hostile: tuple[Path, Path], tmp_path: Path) -> None:
    import importlib.metadata

    tree, _marker = hostile
    _scan_json(str(_wheel(tree, tmp_path)))
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.version("evilpkg")
