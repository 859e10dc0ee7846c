"""Shared pytest configuration for liftgate's tests."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

# The CLI's safety net turns an unexpected exception into one line and exit 2; in the tests such an
# exception must fail the test instead (the net's own test unsets this). Subprocesses inherit it.
os.environ["LIFTGATE_INTERNAL_ERRORS"] = "raise"


def pytest_addoption(parser: pytest.Parser) -> None:
    # --update-golden: rewrite tests/golden/* from the current output instead of comparing (test_report.py).
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="regenerate the golden files under tests/golden/ instead of comparing against them",
    )


def install_fake(prefix: Path, tree: Path, name: str, version: str) -> Path:
    """Lay ``tree`` out as an installed distribution in a fake virtualenv at ``prefix``: files
    under lib/python3.X/site-packages, a dist-info with METADATA and a RECORD listing them."""
    import base64
    import hashlib
    import shutil

    site = prefix / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True, exist_ok=True)
    (prefix / "pyvenv.cfg").write_text("home = /usr/bin\n")
    rows = []
    for src in sorted(p for p in tree.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        rel = src.relative_to(tree).as_posix()
        dest = site / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)
        digest = base64.urlsafe_b64encode(hashlib.sha256(dest.read_bytes()).digest()).rstrip(b"=").decode()
        rows.append(f"{rel},sha256={digest},{dest.stat().st_size}")
    dist = site / f"{name.replace('-', '_')}-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    rows += [f"{dist.name}/METADATA,,", f"{dist.name}/RECORD,,"]
    (dist / "RECORD").write_text("\n".join(rows) + "\n")
    return site


@pytest.fixture
def fake_env(tmp_path: Path) -> Callable[..., Path]:
    """A factory: ``fake_env(tree, name, version, prefix=None)`` -> the site-packages directory."""

    def make(tree: Path, name: str, version: str, prefix: Path | None = None) -> Path:
        return install_fake(prefix or tmp_path / "env", tree, name, version)

    return make


def fetch_release(spec: str) -> str:
    """``name==version`` from the package index, through liftgate's download cache: the archive's path."""
    from packaging.requirements import Requirement

    from liftgate.sources.cache import cache_root
    from liftgate.sources.index import FetchRequest, fetch

    path, _reused = fetch(FetchRequest.parse(spec, Requirement(spec)), cache_root=cache_root())
    return path


def venv_with(dest: Path, wheels: list[str]) -> Path:
    """A throwaway virtual environment at ``dest`` with ``wheels`` installed (``--no-deps``, no
    bytecode, no code of theirs run): its site-packages directory."""
    import subprocess
    import sys

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(dest)], check=True)
    python = dest / "bin" / "python"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "-q",
            "--no-deps",
            "--no-compile",
            *wheels,
        ],
        check=True,
    )
    (site,) = (dest / "lib").glob("python3*/site-packages")
    return site


def sha256_snapshot(root: Path) -> dict[str, str]:
    """Every file under ``root`` (but bytecode caches and liftgate's journal) by path, with its sha256."""
    import hashlib

    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and ".liftgate" not in p.parts
    }
