"""Tests for the sources stage: directories, wheels, sdists, environments and index fetches.

Every fixture is built in ``tmp_path`` (small real-looking wheels, sdists and site-packages);
pip (asked for wheels only) is either faked at `liftgate.sources.index._run_pip` or pointed at a
local find-links directory, and what liftgate downloads itself (``--sdist``, the sdist taken when
no wheel fits, ``name @ url``) comes from `FakeIndex`, a simple index served on 127.0.0.1, so
nothing here touches the network (see test_sources_network.py for that; test_never_execute.py
checks that no spec form lets an sdist's build run).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import socket
import stat
import subprocess
import sys
import tarfile
import threading
import zipfile
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from liftgate.model import Skip
from liftgate.sources import NullObserver, Package, SourceError, SourceFile, resolve_sources
from liftgate.sources import archive as archive_module
from liftgate.sources import index as index_module
from liftgate.sources.archive import CorruptArchiveError, safe_member_path
from liftgate.sources.cache import cache_root
from liftgate.sources.environment import find_site_packages
from liftgate.sources.metadata import parse_pyproject_project, project_metadata, read_metadata_headers

GATE_CUH = b"#if __CUDA_ARCH__ >= 900\nwgmma();\n#endif\n"


class RecordingObserver(NullObserver):
    def __init__(self) -> None:
        self.notes: list[str] = []
        self.started: list[str] = []
        self.finished = 0
        self.advanced = 0

    def start(self, description: str, total: int | None = None) -> None:
        assert len(self.started) == self.finished, "a task started before the previous one finished"
        self.started.append(description)

    def advance(self, amount: int = 1) -> None:
        self.advanced += amount

    def finish(self) -> None:
        self.finished += 1
        assert len(self.started) == self.finished, "finish() without start()"

    def note(self, message: str) -> None:
        self.notes.append(message)


def paths_of(package: Package) -> set[str]:
    return {f.path for f in package.files}


def file_named(package: Package, path: str) -> SourceFile:
    matches = [f for f in package.files if f.path == path]
    assert len(matches) == 1, f"{path} listed {len(matches)} times in {package.name}"
    return matches[0]


def reasons(skips: Sequence[Skip]) -> dict[str, str]:
    return {s.path: s.reason for s in skips}


# --- fixture builders -----------------------------------------------------------------------


def make_wheel(
    directory: Path,
    name: str = "demo_pkg",
    version: str = "1.2.3",
    published: str = "demo-pkg",
    extra: dict[str, bytes] | None = None,
) -> Path:
    dist_info = f"{name}-{version}.dist-info"
    members = {
        f"{name}/__init__.py": b"__version__ = '1.2.3'\n",
        f"{name}/kernels/gate.cuh": GATE_CUH,
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {published}\nVersion: {version}\n\nLong README\nName: not-this\n".encode(),
        f"{dist_info}/WHEEL": b"Wheel-Version: 1.0\nTag: py3-none-any\n",
        **(extra or {}),
    }
    record = "".join(f"{member},,\n" for member in members) + f"{dist_info}/RECORD,,\n"
    members[f"{dist_info}/RECORD"] = record.encode()
    path = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for member, data in members.items():
            wheel.writestr(member, data)
    return path


def add_tar_member(
    archive: tarfile.TarFile, name: str, data: bytes = b"", kind: bytes = tarfile.REGTYPE
) -> None:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    info.mtime = 1_700_000_000
    if kind == tarfile.SYMTYPE:
        info.linkname = "/etc/passwd"
    archive.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


def make_sdist(
    directory: Path, top: str = "demo-pkg-1.0", extra: Sequence[tuple[str, bytes, bytes]] = ()
) -> Path:
    path = directory / f"{top}.tar.gz"
    with tarfile.open(path, "w:gz") as sdist:
        add_tar_member(sdist, f"{top}", kind=tarfile.DIRTYPE)
        add_tar_member(sdist, f"{top}/PKG-INFO", b"Metadata-Version: 2.1\nName: demo-pkg\nVersion: 1.0\n\n")
        add_tar_member(
            sdist, f"{top}/pyproject.toml", b'[project]\nname = "demo-pkg"\ndynamic = ["version"]\n'
        )
        add_tar_member(sdist, f"{top}/csrc/gate.cu", GATE_CUH)
        add_tar_member(sdist, f"{top}/demo_pkg/__init__.py", b"")
        for name, data, kind in extra:
            add_tar_member(sdist, name, data, kind)
    return path


def make_site_packages(site: Path) -> Path:
    """Two distributions, one with a file outside site-packages and one stale RECORD entry."""
    site.mkdir(parents=True)
    (site / "alpha").mkdir()
    (site / "alpha" / "__init__.py").write_text("x = 1\n")
    (site / "alpha" / "gate.cuh").write_bytes(GATE_CUH)
    alpha = site / "alpha-0.1.dist-info"
    alpha.mkdir()
    (alpha / "METADATA").write_text("Metadata-Version: 2.1\nName: Alpha\nVersion: 0.1\n\nbody\n")
    bin_dir = site.parent.parent.parent / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "alpha-tool").write_text("#!/bin/sh\n")
    (alpha / "RECORD").write_text(
        "alpha/__init__.py,sha256=abc,6\n"
        "alpha/gate.cuh,,\n"
        "alpha/removed_long_ago.py,,\n"
        '"alpha/odd,name.py",,\n'
        "../../../bin/alpha-tool,,\n"
        "alpha-0.1.dist-info/METADATA,,\n"
        "alpha-0.1.dist-info/RECORD,,\n"
    )
    (site / "alpha" / "odd,name.py").write_text("")
    (site / "beta_pkg").mkdir()
    (site / "beta_pkg" / "ops.py").write_text("import torch\n")
    beta = site / "beta_pkg-2.0.dist-info"
    beta.mkdir()
    (beta / "METADATA").write_text("Metadata-Version: 2.1\nName: beta-pkg\nVersion: 2.0\n\n")
    (beta / "RECORD").write_text("beta_pkg/ops.py,,\nbeta_pkg-2.0.dist-info/METADATA,,\n")
    return site


# --- wheels ---------------------------------------------------------------------------------


def test_wheel_is_unpacked_into_the_cache_with_name_and_version_from_metadata(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path)
    cache = tmp_path / "cache"
    packages, skips = resolve_sources([str(wheel)], cache_dir=str(cache))

    assert skips == []
    [package] = packages
    assert (package.name, package.version, package.origin) == ("demo-pkg", "1.2.3", str(wheel))
    assert paths_of(package) == {
        "demo_pkg/__init__.py",
        "demo_pkg/kernels/gate.cuh",
        "demo_pkg-1.2.3.dist-info/METADATA",
        "demo_pkg-1.2.3.dist-info/WHEEL",
        "demo_pkg-1.2.3.dist-info/RECORD",
    }
    gate = file_named(package, "demo_pkg/kernels/gate.cuh")
    digest = archive_module.sha256_file(str(wheel))
    assert gate.fspath == str(cache / "unpacked" / digest / "demo_pkg" / "kernels" / "gate.cuh")
    assert Path(gate.fspath).read_bytes() == GATE_CUH
    assert (gate.package, gate.version, gate.size) == ("demo-pkg", "1.2.3", len(GATE_CUH))
    assert gate.mtime_ns == os.stat(gate.fspath).st_mtime_ns
    # No temporary directories are left next to the unpacked tree.
    assert sorted(p.name for p in (cache / "unpacked").iterdir() if not p.name.startswith(".digests")) == [
        digest
    ]


def test_wheel_is_unpacked_once_and_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wheel = make_wheel(tmp_path)
    first, _ = resolve_sources([str(wheel)], cache_dir=str(tmp_path / "cache"))

    def no_second_unpack(*args: object) -> None:
        raise AssertionError("the archive was unpacked twice")

    def no_second_hash(path: str) -> str:
        raise AssertionError("the archive was hashed twice")

    monkeypatch.setattr(archive_module, "_extract_zip", no_second_unpack)
    monkeypatch.setattr(archive_module, "sha256_file", no_second_hash)
    second, _ = resolve_sources([str(wheel)], cache_dir=str(tmp_path / "cache"))
    assert [f.fspath for f in first[0].files] == [f.fspath for f in second[0].files]


def test_wheel_name_falls_back_to_the_file_name_without_metadata(tmp_path: Path) -> None:
    path = tmp_path / "odd_name-0.9-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr("odd_name/kernel.cu", GATE_CUH)
    [package], _ = resolve_sources([str(path)], cache_dir=str(tmp_path / "cache"))
    assert (package.name, package.version) == ("odd-name", "0.9")
    assert paths_of(package) == {"odd_name/kernel.cu"}


def test_corrupt_wheel_is_a_one_line_source_error(tmp_path: Path) -> None:
    wheel = tmp_path / "broken-1.0-py3-none-any.whl"
    wheel.write_bytes(b"PK\x03\x04 this is not really a zip file")
    with pytest.raises(CorruptArchiveError) as caught:
        resolve_sources([str(wheel)], cache_dir=str(tmp_path / "cache"))
    message = str(caught.value)
    assert message.startswith(f"cannot read wheel {wheel}: ")
    assert message.endswith("; re-download it or check the path")
    assert "\n" not in message
    assert isinstance(caught.value, SourceError)
    # Nothing half-unpacked is left to be reused by the next run.
    unpacked = tmp_path / "cache" / "unpacked"
    assert [p.name for p in unpacked.iterdir() if p.name != ".digests"] == []


def test_wheel_with_a_bad_crc_is_corrupt(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path)
    data = bytearray(wheel.read_bytes())
    offset = data.index(b"wgmma")  # stored uncompressed by writestr's default: flip a byte of the content
    data[offset] ^= 0xFF
    wheel.write_bytes(bytes(data))
    with pytest.raises(SourceError, match=r"^cannot read wheel .*demo_pkg-1\.2\.3-py3-none-any\.whl: .*CRC"):
        resolve_sources([str(wheel)], cache_dir=str(tmp_path / "cache"))


def test_zip_members_that_escape_or_link_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "evil-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr("evil/ok.py", b"ok")
        wheel.writestr("../escaped.py", b"pwned")
        wheel.writestr("/abs/escaped.py", b"pwned")
        link = zipfile.ZipInfo("evil/link")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        wheel.writestr(link, "/etc/passwd")
    [package], skips = resolve_sources([str(path)], cache_dir=str(tmp_path / "cache"))
    assert paths_of(package) == {"evil/ok.py"}
    found = reasons(skips)
    assert "unsafe path" in found["../escaped.py"]
    assert "unsafe path" in found["/abs/escaped.py"]
    assert "symlink" in found["evil/link"]
    assert all(s.package == "evil" for s in skips)
    assert not (tmp_path / "escaped.py").exists()
    assert not (tmp_path / "cache" / "unpacked" / "escaped.py").exists()


# --- sdists ---------------------------------------------------------------------------------


def test_sdist_strips_its_top_level_directory(tmp_path: Path) -> None:
    sdist = make_sdist(tmp_path)
    [package], skips = resolve_sources([str(sdist)], cache_dir=str(tmp_path / "cache"))
    assert skips == []
    assert (package.name, package.version) == ("demo-pkg", "1.0")
    assert paths_of(package) == {"PKG-INFO", "pyproject.toml", "csrc/gate.cu", "demo_pkg/__init__.py"}
    gate = file_named(package, "csrc/gate.cu")
    assert Path(gate.fspath).read_bytes() == GATE_CUH
    assert gate.mtime_ns == 1_700_000_000 * 10**9  # the member's own time, not the unpacking time


def test_tar_with_escaping_link_and_device_members_is_unpacked_safely(tmp_path: Path) -> None:
    sdist = make_sdist(
        tmp_path,
        extra=[
            ("demo-pkg-1.0/../evil", b"pwned", tarfile.REGTYPE),
            ("/tmp/absolute-evil", b"pwned", tarfile.REGTYPE),
            ("demo-pkg-1.0/link", b"", tarfile.SYMTYPE),
            ("demo-pkg-1.0/fifo", b"", tarfile.FIFOTYPE),
            ("demo-pkg-1.0/tty", b"", tarfile.CHRTYPE),
        ],
    )
    [package], skips = resolve_sources([str(sdist)], cache_dir=str(tmp_path / "cache"))
    assert paths_of(package) == {"PKG-INFO", "pyproject.toml", "csrc/gate.cu", "demo_pkg/__init__.py"}
    found = reasons(skips)
    assert "unsafe path" in found["demo-pkg-1.0/../evil"]
    assert "unsafe path" in found["/tmp/absolute-evil"]
    assert "symlink" in found["link"]
    assert "special file" in found["fifo"]
    assert "special file" in found["tty"]
    assert not (tmp_path / "evil").exists()
    assert not (tmp_path / "cache" / "unpacked" / "evil").exists()
    assert not Path("/tmp/absolute-evil").exists()


def test_unsafe_member_skips_are_remembered_when_the_tree_is_reused(tmp_path: Path) -> None:
    sdist = make_sdist(tmp_path, extra=[("demo-pkg-1.0/link", b"", tarfile.SYMTYPE)])
    _, first = resolve_sources([str(sdist)], cache_dir=str(tmp_path / "cache"))
    _, second = resolve_sources([str(sdist)], cache_dir=str(tmp_path / "cache"))
    assert reasons(first) == reasons(second) == {"link": "symlink in archive; not followed"}


def test_zip_sdist(tmp_path: Path) -> None:
    path = tmp_path / "zipped-3.1.zip"
    with zipfile.ZipFile(path, "w") as sdist:
        sdist.writestr("zipped-3.1/PKG-INFO", "Metadata-Version: 1.0\nName: Zipped\nVersion: 3.1\n\n")
        sdist.writestr("zipped-3.1/zipped/kernel.cuh", GATE_CUH)
    [package], _ = resolve_sources([str(path)], cache_dir=str(tmp_path / "cache"))
    assert (package.name, package.version) == ("Zipped", "3.1")
    assert paths_of(package) == {"PKG-INFO", "zipped/kernel.cuh"}


def test_truncated_sdist_is_corrupt(tmp_path: Path) -> None:
    sdist = make_sdist(tmp_path)
    sdist.write_bytes(sdist.read_bytes()[:60])
    with pytest.raises(SourceError, match=r"^cannot read sdist .*demo-pkg-1\.0\.tar\.gz: .*; re-download it"):
        resolve_sources([str(sdist)], cache_dir=str(tmp_path / "cache"))


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("a/b.py", "a/b.py"),
        ("./a//b.py", "a/b.py"),
        ("a/./b/", "a/b"),
        ("../evil", None),
        ("a/../../evil", None),
        ("a/../b", None),
        ("/etc/passwd", None),
        ("C:/evil", None),
        ("\\\\server\\share", None),
        ("./", ""),
    ],
)
def test_safe_member_path(name: str, expected: str | None) -> None:
    assert safe_member_path(name) == expected


# --- directories ----------------------------------------------------------------------------


def make_project(root: Path) -> Path:
    root.mkdir()
    (root / "pyproject.toml").write_text('[project]\nname = "my-kernels"\nversion = "0.3.0"\n')
    (root / "src" / "my_kernels").mkdir(parents=True)
    (root / "src" / "my_kernels" / "gate.cuh").write_bytes(GATE_CUH)
    (root / "src" / "my_kernels" / "__init__.py").write_text("")
    for junk in (".git", "__pycache__", "node_modules", ".venv", "src/my_kernels/__pycache__"):
        (root / junk).mkdir(parents=True, exist_ok=True)
        (root / junk / "junk.py").write_text("")
    (root / "myenv").mkdir()
    (root / "myenv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (root / "myenv" / "lib.py").write_text("")
    return root


def test_directory_is_one_package_named_by_pyproject(tmp_path: Path) -> None:
    root = make_project(tmp_path / "checkout")
    [package], skips = resolve_sources([str(root)])
    assert (package.name, package.version, package.origin) == ("my-kernels", "0.3.0", str(root))
    assert paths_of(package) == {"pyproject.toml", "src/my_kernels/gate.cuh", "src/my_kernels/__init__.py"}
    gate = file_named(package, "src/my_kernels/gate.cuh")
    assert gate.fspath == str(root / "src" / "my_kernels" / "gate.cuh")
    assert (gate.size, gate.mtime_ns) == (len(GATE_CUH), os.stat(gate.fspath).st_mtime_ns)
    assert reasons(skips) == {"myenv": "virtual environment; scan it with env:PATH"}


def test_relative_directory_spec_gives_absolute_fspaths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_project(tmp_path / "checkout")
    monkeypatch.chdir(tmp_path)
    [package], _ = resolve_sources(["checkout"])
    assert package.origin == "checkout"
    assert all(os.path.isabs(f.fspath) for f in package.files)


def test_symlink_loop_broken_link_and_duplicate_are_skips(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "k.cu").write_bytes(GATE_CUH)
    (root / "a" / "b" / "loop").symlink_to(root / "a")
    (root / "self").symlink_to(root)
    (root / "also_b").symlink_to(root / "a" / "b")
    (root / "dangling.cuh").symlink_to(root / "nowhere.cuh")
    (root / "linked.cuh").symlink_to(root / "a" / "b" / "k.cu")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "shared.h").write_text("")
    (root / "vendor").symlink_to(outside)

    [package], skips = resolve_sources([str(root)])
    assert paths_of(package) == {"a/b/k.cu", "linked.cuh"}
    assert file_named(package, "linked.cuh").size == len(GATE_CUH)
    found = reasons(skips)
    # A link out of the tree is not followed: a checkout's link could put any file in a report.
    assert (
        found.pop("vendor")
        == f"symlink out of the tree (to {outside}); not followed: scan its target on its own"
    )
    assert found == {
        "a/b/loop": "symlink loop",
        "self": "symlink loop",
        "also_b": "symlink to a directory already listed as a/b",
        "dangling.cuh": "broken symlink",
    }


def test_symlink_chain_that_loops_on_itself_is_a_skip(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    root.mkdir()
    (root / "ping").symlink_to(root / "pong")
    (root / "pong").symlink_to(root / "ping")
    [package], skips = resolve_sources([str(root)])
    assert package.files == ()
    assert reasons(skips) == {"ping": "symlink loop", "pong": "symlink loop"}


def test_unreadable_directory_is_a_skip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_project(tmp_path / "checkout")
    locked = root / "src" / "my_kernels"
    real_scandir = os.scandir

    def scandir(path: str) -> object:
        if os.path.abspath(path) == str(locked):
            raise PermissionError(13, "Permission denied", path)
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    [package], skips = resolve_sources([str(root)])
    assert paths_of(package) == {"pyproject.toml"}
    assert reasons(skips)["src/my_kernels"] == "cannot list directory: Permission denied"


def test_fifo_in_a_directory_is_skipped_not_listed(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    root.mkdir()
    os.mkfifo(root / "pipe")
    (root / "k.cu").write_bytes(GATE_CUH)
    [package], skips = resolve_sources([str(root)])
    assert paths_of(package) == {"k.cu"}
    assert "not a regular file" in reasons(skips)["pipe"]


def test_directory_metadata_sources_in_order(tmp_path: Path) -> None:
    dynamic = tmp_path / "dynamic"
    dynamic.mkdir()
    (dynamic / "pyproject.toml").write_text('[project]\nname = "dyn"\ndynamic = ["version"]\n')
    (dynamic / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: dyn-from-pkg-info\nVersion: 4.5\n\n")
    assert project_metadata(str(dynamic)) == ("dyn", "4.5")

    cfg = tmp_path / "cfg"
    cfg.mkdir()
    (cfg / "setup.cfg").write_text("[metadata]\nname = cfg-pkg\nversion = attr: cfg_pkg.__version__\n")
    assert project_metadata(str(cfg)) == ("cfg-pkg", None)

    bare = tmp_path / "bare-tree"
    bare.mkdir()
    (bare / "x.cu").write_text("")
    [package], _ = resolve_sources([str(bare)])
    assert (package.name, package.version) == ("bare-tree", None)


def test_broken_pyproject_falls_back_to_the_directory_name(tmp_path: Path) -> None:
    root = tmp_path / "broken-toml"
    root.mkdir()
    (root / "pyproject.toml").write_text("[project\nname = ")
    [package], _ = resolve_sources([str(root)])
    assert (package.name, package.version) == ("broken-toml", None)


def test_fallback_pyproject_parser_reads_only_the_project_table() -> None:
    text = (
        "[tool.thing]\nname = 'not-me'\n"
        "[project]  # the one\nname = 'real-name'  # trailing comment\n"
        'version = "1.0"\n'
        "[project.optional-dependencies]\nname = 'nope'\n"
    )
    assert parse_pyproject_project(text) == {"name": "real-name", "version": "1.0"}


def test_metadata_headers_stop_at_the_body(tmp_path: Path) -> None:
    path = tmp_path / "METADATA"
    path.write_text("Name: first\nSummary: one\n  continued\nVersion: 1\n\nName: body-not-header\n")
    assert read_metadata_headers(str(path)) == {"name": "first", "summary": "one", "version": "1"}
    assert read_metadata_headers(str(tmp_path / "missing")) == {}


# --- single files and bad specs -------------------------------------------------------------


def test_a_plain_file_is_a_package_of_itself(tmp_path: Path) -> None:
    path = tmp_path / "trtllm_allreduce.cuh"
    path.write_bytes(GATE_CUH)
    [package], skips = resolve_sources([str(path)])
    assert skips == []
    assert (package.name, package.version) == ("trtllm_allreduce", None)
    [only] = package.files
    assert (only.path, only.fspath, only.size) == ("trtllm_allreduce.cuh", str(path), len(GATE_CUH))


@pytest.mark.parametrize(
    "spec", ["./missing/dir", "missing.whl", "missing-1.0.tar.gz", "kernel.cuh", "a b c", ""]
)
def test_nonexistent_paths_and_nonsense_are_source_errors(
    spec: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)

    def no_pip(*args: object) -> tuple[int, str]:
        raise AssertionError("pip must not run for a path-like spec")

    monkeypatch.setattr(index_module, "_run_pip", no_pip)
    with pytest.raises(SourceError) as caught:
        resolve_sources([spec], cache_dir=str(tmp_path / "cache"))
    assert str(caught.value) == f"no such file, directory or package: {spec}"


def test_broken_symlink_spec_is_a_source_error(tmp_path: Path) -> None:
    link = tmp_path / "gone.whl"
    link.symlink_to(tmp_path / "nowhere.whl")
    with pytest.raises(SourceError, match="broken symlink"):
        resolve_sources([str(link)])


def test_a_lone_string_is_one_spec(tmp_path: Path) -> None:
    path = tmp_path / "k.cu"
    path.write_bytes(GATE_CUH)
    packages, _ = resolve_sources(str(path))
    assert [p.name for p in packages] == ["k"]


# --- environments ---------------------------------------------------------------------------


def test_site_packages_gives_one_package_per_distribution(tmp_path: Path) -> None:
    site = make_site_packages(tmp_path / "venv" / "lib" / "python3.11" / "site-packages")
    packages, skips = resolve_sources([f"env:{site}"])
    assert skips == []
    by_name = {p.name: p for p in packages}
    assert sorted(by_name) == ["Alpha", "beta-pkg"]
    alpha = by_name["Alpha"]
    assert (alpha.version, alpha.origin) == ("0.1", f"env:{site}")
    assert paths_of(alpha) == {
        "alpha/__init__.py",
        "alpha/gate.cuh",
        "alpha/odd,name.py",
        "../../../bin/alpha-tool",
        "alpha-0.1.dist-info/METADATA",
        "alpha-0.1.dist-info/RECORD",
    }
    tool = file_named(alpha, "../../../bin/alpha-tool")
    assert tool.fspath == str(tmp_path / "venv" / "bin" / "alpha-tool")
    gate = file_named(alpha, "alpha/gate.cuh")
    assert (gate.package, gate.version, gate.fspath) == ("Alpha", "0.1", str(site / "alpha" / "gate.cuh"))
    assert paths_of(by_name["beta-pkg"]) == {"beta_pkg/ops.py", "beta_pkg-2.0.dist-info/METADATA"}


def test_environment_can_be_named_many_ways(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    site = make_site_packages(venv / "lib" / "python3.11" / "site-packages")
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (venv / "lib64").symlink_to(venv / "lib")  # as venv creates it: must not list everything twice

    expected = {("Alpha", "0.1"), ("beta-pkg", "2.0")}
    for packages, _ in (
        resolve_sources([], env=str(venv)),
        resolve_sources([f"env:{venv}"]),
        resolve_sources([str(venv)]),  # a directory holding pyvenv.cfg is an environment
        resolve_sources([str(site)]),  # a directory holding *.dist-info is a site-packages
    ):
        assert {(p.name, p.version) for p in packages} == expected
        assert {p.origin for p in packages} == {f"env:{site}"}


def test_env_keyword_adds_to_the_specs(tmp_path: Path) -> None:
    site = make_site_packages(tmp_path / "venv" / "lib" / "python3.11" / "site-packages")
    single = tmp_path / "k.cu"
    single.write_bytes(GATE_CUH)
    packages, _ = resolve_sources([str(single)], env=str(site))
    assert sorted(p.name for p in packages) == ["Alpha", "beta-pkg", "k"]


def test_windows_layout_prefix(tmp_path: Path) -> None:
    site = tmp_path / "prefix" / "Lib" / "site-packages"
    (site / "gamma-1.0.dist-info").mkdir(parents=True)
    assert find_site_packages(str(tmp_path / "prefix")) == [str(site)]


def test_missing_environment_and_environment_without_site_packages(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match=r"^no such environment: .*nowhere; pass a virtualenv"):
        resolve_sources([f"env:{tmp_path / 'nowhere'}"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(SourceError, match=r"^no site-packages found in .*empty"):
        resolve_sources([], env=str(tmp_path / "empty"))


def test_distribution_without_record_is_a_skip(tmp_path: Path) -> None:
    site = make_site_packages(tmp_path / "lib" / "python3.11" / "site-packages")
    (site / "beta_pkg-2.0.dist-info" / "RECORD").unlink()
    packages, skips = resolve_sources([f"env:{site}"])
    assert [p.name for p in packages] == ["Alpha"]
    assert skips == [
        Skip("beta_pkg-2.0.dist-info", "no RECORD file: which files it installed is unknown", "beta-pkg")
    ]


def test_editable_install_lists_the_packages_it_installs_from_its_project(tmp_path: Path) -> None:
    site = make_site_packages(tmp_path / "lib" / "python3.11" / "site-packages")
    project = make_project(tmp_path / "checkout")
    editable = site / "my_kernels-0.3.0.dist-info"
    editable.mkdir()
    (editable / "METADATA").write_text("Metadata-Version: 2.1\nName: my-kernels\nVersion: 0.3.0\n\n")
    (site / "__editable__.my_kernels-0.3.0.pth").write_text(str(project / "src") + "\n")
    (editable / "RECORD").write_text(
        "__editable__.my_kernels-0.3.0.pth,,\nmy_kernels-0.3.0.dist-info/METADATA,,\n"
    )
    (editable / "direct_url.json").write_text(
        json.dumps({"url": project.as_uri(), "dir_info": {"editable": True}})
    )
    observer = RecordingObserver()
    packages, skips = resolve_sources([f"env:{site}"], observer=observer)
    mine = {p.name: p for p in packages}["my-kernels"]
    assert {"__editable__.my_kernels-0.3.0.pth", "src/my_kernels/gate.cuh"} <= paths_of(mine)
    assert file_named(mine, "src/my_kernels/gate.cuh").fspath == str(
        project / "src" / "my_kernels" / "gate.cuh"
    )
    assert any("editable" in note and str(project) in note for note in observer.notes)
    # the package directory under the source root the .pth lists, not the rest of the checkout
    assert "pyproject.toml" not in paths_of(mine) and not any(p.startswith("myenv") for p in paths_of(mine))
    assert "myenv" not in {s.path for s in skips}


def test_editable_install_with_a_missing_project_is_noted(tmp_path: Path) -> None:
    site = make_site_packages(tmp_path / "lib" / "python3.11" / "site-packages")
    (site / "alpha-0.1.dist-info" / "direct_url.json").write_text(
        json.dumps({"url": (tmp_path / "gone").as_uri(), "dir_info": {"editable": True}})
    )
    observer = RecordingObserver()
    _, skips = resolve_sources([f"env:{site}"], observer=observer)
    assert Skip(str(tmp_path / "gone"), "editable install's source directory not found", "Alpha") in skips
    assert any("missing" in note for note in observer.notes)


def test_egg_info_with_installed_files(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    (site / "legacy").mkdir(parents=True)
    (site / "legacy" / "__init__.py").write_text("")
    egg = site / "legacy-0.5-py3.11.egg-info"
    egg.mkdir()
    (egg / "PKG-INFO").write_text("Metadata-Version: 1.1\nName: legacy\nVersion: 0.5\n\n")
    (egg / "installed-files.txt").write_text("../legacy/__init__.py\nPKG-INFO\n")
    no_list = site / "other-1.0.egg-info"
    no_list.mkdir()
    [package], skips = resolve_sources([str(site)])
    assert (package.name, package.version) == ("legacy", "0.5")
    assert paths_of(package) == {"legacy/__init__.py", "legacy-0.5-py3.11.egg-info/PKG-INFO"}
    assert [s.path for s in skips] == ["other-1.0.egg-info"]


def test_no_specs_reads_the_running_interpreter(tmp_path: Path) -> None:
    packages, _ = resolve_sources([])
    by_name = {p.name.lower(): p for p in packages}
    assert "packaging" in by_name, "packaging is a liftgate dependency, so it is installed here"
    version_py = file_named(by_name["packaging"], "packaging/version.py")
    import packaging.version

    assert os.path.samefile(version_py.fspath, packaging.version.__file__)
    assert by_name["packaging"].origin.startswith("env:")


# --- fetching from the index (pip faked) ----------------------------------------------------


class FakePip:
    """Stands in for ``pip download``: answers each call from a script and records the commands."""

    def __init__(self, tmp_path: Path, *answers: tuple[int, str, str | None]) -> None:
        self.tmp_path = tmp_path
        self.answers = list(answers)  # (returncode, output, wheel version to save or None)
        self.commands: list[list[str]] = []

    def __call__(self, command: Sequence[str], cwd: str, spec: str) -> tuple[int, str]:
        self.commands.append(list(command))
        returncode, output, version = self.answers.pop(0)
        if version is not None:
            build = self.tmp_path / f"built-{len(self.commands)}"
            build.mkdir()
            wheel = make_wheel(build, version=version)
            target = Path(command[command.index("-d") + 1]) / wheel.name
            target.write_bytes(wheel.read_bytes())
            output = output.format(saved=os.path.relpath(target, cwd))
        return returncode, output


SAVED = "Collecting demo-pkg\n  Downloading demo_pkg.whl (1 kB)\nSaved {saved}\nSuccessfully downloaded demo-pkg\n"
NOT_FOUND = (
    "ERROR: Could not find a version that satisfies the requirement demo-pkg==9.9 "
    "(from versions: 0.1rc1, 0.1, 0.2, 0.3, 0.4, 1.0, 1.1, 1.2.3, 2.0rc1)\n"
    "ERROR: No matching distribution found for demo-pkg==9.9\n"
)


def test_pinned_requirement_is_fetched_once_then_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pip = FakePip(tmp_path, (0, SAVED, "1.2.3"))
    monkeypatch.setattr(index_module, "_run_pip", pip)
    cache = tmp_path / "cache"
    [package], _ = resolve_sources(["demo-pkg==1.2.3"], cache_dir=str(cache))
    assert (package.name, package.version, package.origin) == ("demo-pkg", "1.2.3", "demo-pkg==1.2.3")
    assert "demo_pkg/kernels/gate.cuh" in paths_of(package)
    [command] = pip.commands
    assert command[:4] == [sys.executable, "-m", "pip", "download"]
    assert {"--no-deps", "--no-build-isolation", "--only-binary=:all:"} <= set(command)
    assert command[command.index("-d") + 1] == str(cache / "downloads" / "demo-pkg" / "1.2.3")
    assert command[-1] == "demo-pkg==1.2.3"

    observer = RecordingObserver()
    [again], _ = resolve_sources(["Demo_Pkg==1.2.3"], cache_dir=str(cache), observer=observer)
    assert len(pip.commands) == 1, "a pinned version in the cache must not run pip again"
    assert again.version == "1.2.3"
    assert any("from the cache" in note for note in observer.notes)


def test_unpinned_requirement_always_asks_pip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    latest = cache / "downloads" / "demo-pkg" / "latest"
    pip = FakePip(tmp_path, (0, SAVED, "1.0"), (0, SAVED, "2.0"))
    monkeypatch.setattr(index_module, "_run_pip", pip)
    [first], _ = resolve_sources(["demo-pkg"], cache_dir=str(cache))
    [second], _ = resolve_sources(["demo-pkg"], cache_dir=str(cache))
    assert (first.version, second.version) == ("1.0", "2.0")
    assert len(pip.commands) == 2
    assert sorted(p.name for p in latest.iterdir()) == [
        "demo_pkg-1.0-py3-none-any.whl",
        "demo_pkg-2.0-py3-none-any.whl",
    ]


def test_unknown_version_lists_available_releases(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_index: FakeIndex
) -> None:
    """pip (wheels only) finds nothing; the index's page, wheels and sdists alike, says what there is."""
    for version in ("0.1rc1", "0.1", "0.2", "0.3", "0.4", "1.0", "1.1", "1.2.3", "2.0rc1"):
        fake_index.add(
            release(tmp_path, version, "wheel" if version in ("0.1rc1", "1.1", "1.2.3") else "sdist")
        )
    pip = FakePip(tmp_path, (1, NOT_FOUND, None))
    monkeypatch.setattr(index_module, "_run_pip", pip)
    with pytest.raises(SourceError) as caught:
        resolve_sources(["demo-pkg==9.9"], cache_dir=str(tmp_path / "cache"))
    assert str(caught.value) == (
        "demo-pkg==9.9 is not on the package index; available: 0.3, 0.4, 1.0, 1.1, 1.2.3 (and 4 more)"
    )
    [command] = pip.commands
    assert "--only-binary=:all:" in command, "pip is only ever asked for wheels"
    assert not (tmp_path / "cache" / "downloads" / "demo-pkg").exists(), "failed fetches leave no empty dirs"


def not_found(name: str) -> str:
    """pip's answer for a name with no release it can use, wheel or project alike."""
    return (
        f"ERROR: Could not find a version that satisfies the requirement {name} (from versions: none)\n"
        f"ERROR: No matching distribution found for {name}\n"
    )


def test_unknown_package_says_no_such_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_index: FakeIndex
) -> None:
    monkeypatch.setattr(index_module, "_run_pip", FakePip(tmp_path, (1, not_found("zzz"), None)))
    with pytest.raises(SourceError) as caught:
        resolve_sources(["zzz"], cache_dir=str(tmp_path / "cache"))
    assert str(caught.value) == (
        "no project zzz on the package index; check the spelling, or pass a path (a wheel, an sdist or a directory)"
    )


def test_misspelled_package_is_no_project_with_a_suggestion_and_no_wheel_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_index: FakeIndex
) -> None:
    """The index has no such project (404), or a mirror answers an empty page: either way no word
    about wheels or platforms, and a suggestion from known names (never from the index)."""
    pip = FakePip(tmp_path, (1, not_found("flashinfer-pyhton"), None), (1, not_found("sgl-kernal"), None))
    monkeypatch.setattr(index_module, "_run_pip", pip)
    observer = RecordingObserver()
    with pytest.raises(SourceError) as caught:
        resolve_sources(["flashinfer-pyhton"], cache_dir=str(tmp_path / "cache"), observer=observer)
    assert str(caught.value) == (
        "no project flashinfer-pyhton on the package index (did you mean flashinfer-python?); check the "
        "spelling, or pass a path (a wheel, an sdist or a directory)"
    )
    fake_index.projects["sgl-kernal"] = []  # a mirror that answers every name with a page
    with pytest.raises(SourceError) as empty:
        resolve_sources(["sgl-kernal==0.3"], cache_dir=str(tmp_path / "cache"), observer=observer)
    assert str(empty.value).startswith(
        "the package index lists no release of sgl-kernal (did you mean sgl-kernel?)"
    )
    for message in (str(caught.value), str(empty.value), *observer.notes):
        assert "wheel" not in message.split(";")[0] and "platform" not in message
    assert [path for path, _accept in fake_index.requests] == [
        "/simple/flashinfer-pyhton/",
        "/simple/sgl-kernal/",
    ]


def clear_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in (
        "PIP_PROXY",
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "ALL_PROXY",
        "all_proxy",
    ):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)


PROXY_REFUSED = (
    "WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) after connection "
    "broken by 'ProxyError('Cannot connect to proxy.', NewConnectionError('<pip._vendor.urllib3.connection."
    "HTTPSConnection object at 0x7f>: Failed to establish a new connection: [Errno 111] Connection refused'))': "
    "/simple/six/\n"
    "ERROR: Could not find a version that satisfies the requirement six (from versions: none)\n"
    "ERROR: No matching distribution found for six\n"
)


def test_dead_proxy_is_named_not_taken_for_a_missing_release(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clear_proxies(monkeypatch)
    monkeypatch.setenv("HTTPS_PROXY", "http://user:s3cret@127.0.0.1:9")
    pip = FakePip(tmp_path, (1, PROXY_REFUSED, None), (1, PROXY_REFUSED, None), (1, PROXY_REFUSED, None))
    monkeypatch.setattr(index_module, "_run_pip", pip)
    with pytest.raises(SourceError) as caught:
        resolve_sources(["six"], cache_dir=str(tmp_path / "cache"))
    assert str(caught.value) == (
        "cannot reach the package index through the proxy http://127.0.0.1:9 (HTTPS_PROXY) to fetch six; "
        "check the network and the proxy, or pass a local wheel/directory"
    )
    assert len(pip.commands) == 1, "no sdist lookup when pip could not reach the index"

    monkeypatch.setenv("PIP_PROXY", "http://proxy.internal:3128")
    with pytest.raises(
        SourceError, match=r"through the proxy http://proxy\.internal:3128 \(PIP_PROXY\) to fetch six"
    ):
        resolve_sources(["six"], cache_dir=str(tmp_path / "cache"))

    clear_proxies(
        monkeypatch
    )  # pip.conf of another user, say: pip reports the proxy, liftgate cannot name it
    with pytest.raises(SourceError) as unnamed:
        resolve_sources(["six"], cache_dir=str(tmp_path / "cache"))
    assert str(unnamed.value).startswith(
        "cannot reach the package index through a proxy (pip reports a proxy error) to fetch six; check"
    )


def test_dead_proxy_without_pip_retries_is_named_by_the_index_lookup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pip with retries 0 prints no connection warning, only "(from versions: none)": liftgate's own
    lookup of the project goes through the same proxy (on 127.0.0.1, where nothing listens) and fails."""
    clear_proxies(monkeypatch)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    monkeypatch.setenv("PIP_INDEX_URL", "https://index.invalid/simple/")
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{port}")
    for variable in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(index_module, "_run_pip", FakePip(tmp_path, (1, not_found("six"), None)))
    with pytest.raises(SourceError) as caught:
        resolve_sources(["six"], cache_dir=str(tmp_path / "cache"))
    assert str(caught.value).startswith(
        f"cannot reach the package index at https://index.invalid/simple/ through the proxy "
        f"http://127.0.0.1:{port} (HTTPS_PROXY) to fetch six ("
    )
    assert str(caught.value).endswith("check the network and the proxy, or pass a local wheel/directory")
    assert "no release" not in str(caught.value)


def test_unreachable_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clear_proxies(monkeypatch)
    output = (
        "WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) after "
        "connection broken by 'NewConnectionError('<HTTPSConnection object>: Failed to establish a new "
        "connection: [Errno -3] Temporary failure in name resolution')': /simple/demo-pkg/\n"
        "ERROR: Could not find a version that satisfies the requirement demo-pkg==1.0 (from versions: none)\n"
    )
    pip = FakePip(tmp_path, (1, output, None))
    monkeypatch.setattr(index_module, "_run_pip", pip)
    with pytest.raises(SourceError) as caught:
        resolve_sources(["demo-pkg==1.0"], cache_dir=str(tmp_path / "cache"))
    assert str(caught.value) == (
        "cannot reach the package index to fetch demo-pkg==1.0; check the network or pass a local wheel/directory"
    )
    assert len(pip.commands) == 1, "no sdist retry when the index is unreachable"


def test_no_wheel_that_fits_takes_the_sdist_from_the_index_without_building_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_index: FakeIndex
) -> None:
    """pip is asked once, for a wheel; the sdist comes from the index, as it is, and is said so once."""
    fake_index.add(release(tmp_path, "1.0"))
    pip = FakePip(tmp_path, (1, NO_WHEEL, None))
    monkeypatch.setattr(index_module, "_run_pip", pip)
    cache = tmp_path / "cache"
    observer = RecordingObserver()
    [package], _ = resolve_sources(["demo-pkg==1.0"], cache_dir=str(cache), observer=observer)
    assert (package.version, "csrc/gate.cu" in paths_of(package)) == ("1.0", True)
    [command] = pip.commands
    assert "--only-binary=:all:" in command
    assert observer.notes == [
        "no wheel of demo-pkg==1.0 fits this platform, so its sdist demo-pkg-1.0.tar.gz was taken from "
        "the package index (it is never built)"
    ]
    # Saved where pip would have saved the wheel, so the next plain scan reuses it without pip.
    assert (cache / "downloads" / "demo-pkg" / "1.0" / "demo-pkg-1.0.tar.gz").is_file()
    [again], _ = resolve_sources(["demo-pkg==1.0"], cache_dir=str(cache))
    assert len(pip.commands) == 1
    assert "csrc/gate.cu" in paths_of(again)


NO_WHEEL = (
    "ERROR: Could not find a version that satisfies the requirement demo-pkg==1.0 (from versions: none)\n"
)
BUILD_FAILED = (
    "  error: subprocess-exited-with-error\n      error: no compiler found\n"
    "error: metadata-generation-failed\nhint: See above for details.\n"
)


def test_no_wheel_that_fits_and_no_sdist_says_what_there_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_index: FakeIndex
) -> None:
    fake_index.add(release(tmp_path, "1.0", "wheel"))  # for another platform, as pip's answer has it
    monkeypatch.setattr(index_module, "_run_pip", FakePip(tmp_path, (1, NO_WHEEL, None), (1, NO_WHEEL, None)))
    cache = tmp_path / "cache"
    with pytest.raises(SourceError) as caught:
        resolve_sources(["demo-pkg==1.0"], cache_dir=str(cache))
    assert str(caught.value) == (
        "demo-pkg==1.0 has no wheel for this platform and no sdist on the package index, only "
        "demo_pkg-1.0-py3-none-any.whl; pass a local wheel, sdist or source tree"
    )
    assert not (cache / "downloads" / "demo-pkg").exists()

    # pip configured with no index (find-links only): liftgate's client has nowhere to look.
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    with pytest.raises(SourceError) as no_index:
        resolve_sources(["demo-pkg==1.0"], cache_dir=str(cache))
    assert str(no_index.value) == (
        "no wheel of demo-pkg==1.0 fits this platform, and pip is configured not to use a package index "
        "(no-index), so liftgate cannot fetch its sdist; pass a local sdist/directory"
    )
    assert not (cache / "downloads" / "demo-pkg").exists()


def test_offline_uses_only_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"

    def no_pip(*args: object) -> tuple[int, str]:
        raise AssertionError("offline must not run pip")

    monkeypatch.setattr(index_module, "_run_pip", no_pip)
    with pytest.raises(SourceError, match=r"^demo-pkg is not in the cache at .* and liftgate is offline"):
        resolve_sources(["demo-pkg"], cache_dir=str(cache), offline=True)

    for version in ("1.0", "2.0"):
        target = cache / "downloads" / "demo-pkg" / version
        target.mkdir(parents=True)
        (tmp_path / version).mkdir()
        make_wheel(tmp_path / version, version=version).rename(
            target / f"demo_pkg-{version}-py3-none-any.whl"
        )
    [newest], _ = resolve_sources(["demo-pkg"], cache_dir=str(cache), offline=True)
    [older], _ = resolve_sources(["demo-pkg<2"], cache_dir=str(cache), offline=True)
    assert (newest.version, older.version) == ("2.0", "1.0")


def test_damaged_download_in_the_cache_is_fetched_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    target = cache / "downloads" / "demo-pkg" / "1.2.3"
    target.mkdir(parents=True)
    (target / "demo_pkg-1.2.3-py3-none-any.whl").write_bytes(b"half a download")
    pip = FakePip(tmp_path, (0, SAVED, "1.2.3"))
    monkeypatch.setattr(index_module, "_run_pip", pip)
    observer = RecordingObserver()
    [package], _ = resolve_sources(["demo-pkg==1.2.3"], cache_dir=str(cache), observer=observer)
    assert "demo_pkg/kernels/gate.cuh" in paths_of(package)
    assert len(pip.commands) == 1
    assert any("damaged" in note for note in observer.notes)


def test_real_pip_from_a_local_find_links_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole path through a real ``pip download`` subprocess, with no index: only a local directory."""
    links = tmp_path / "links"
    links.mkdir()
    make_wheel(links)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    cache = tmp_path / "cache"
    [package], _ = resolve_sources(["demo-pkg==1.2.3"], cache_dir=str(cache))
    assert (package.name, package.version) == ("demo-pkg", "1.2.3")
    assert (cache / "downloads" / "demo-pkg" / "1.2.3" / "demo_pkg-1.2.3-py3-none-any.whl").is_file()
    with pytest.raises(
        SourceError, match=r"^demo-pkg==9\.9 is not on the package index; available: 1\.2\.3$"
    ):
        resolve_sources(["demo-pkg==9.9"], cache_dir=str(cache))


# --- --sdist: the sdist straight from the index (a fake index on 127.0.0.1) ----------------


class FakeIndex:
    """A simple index on 127.0.0.1: PEP 691 JSON to clients that ask for it (unless ``html_only``),
    PEP 503 HTML with ``#sha256=`` fragments otherwise, and the files under ``/files/``."""

    def __init__(self) -> None:
        self.html_only = False
        self.projects: dict[
            str, list[tuple[str, str, bool]]
        ] = {}  # name -> (filename, listed sha256, yanked)
        self.blobs: dict[str, bytes] = {}
        self.requests: list[tuple[str, str]] = []  # (path, Accept)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()
        self.closed = False

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def url(self) -> str:
        return f"{self.root}/simple/"

    def add(self, path: Path, *, listed_sha256: str | None = None, yanked: bool = False) -> None:
        data = path.read_bytes()
        self.blobs[path.name] = data
        digest = listed_sha256 or hashlib.sha256(data).hexdigest()
        self.projects.setdefault("demo-pkg", []).append((path.name, digest, yanked))

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.server.shutdown()
            self.server.server_close()

    def _page(self, name: str, accept: str) -> tuple[str, bytes]:
        files = self.projects[name]
        if not self.html_only and "application/vnd.pypi.simple.v1+json" in accept:
            entries = [
                {"filename": f, "url": f"{self.root}/files/{f}", "hashes": {"sha256": h}, "yanked": y}
                for f, h, y in files
            ]
            page = {"meta": {"api-version": "1.1"}, "name": name, "files": entries}
            return "application/vnd.pypi.simple.v1+json", json.dumps(page).encode()
        anchors = "".join(
            f'<a href="../../files/{f}#sha256={h}"{" data-yanked" if y else ""}>{f}</a><br/>\n'
            for f, h, y in files
        )
        return "text/html", f"<!DOCTYPE html><html><body>\n{anchors}</body></html>\n".encode()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        index = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                accept = self.headers.get("Accept", "")
                index.requests.append((self.path, accept))
                parts = self.path.strip("/").split("/")
                if len(parts) == 2 and parts[0] == "simple" and parts[1] in index.projects:
                    content_type, body = index._page(parts[1], accept)
                elif len(parts) == 2 and parts[0] == "files" and parts[1] in index.blobs:
                    content_type, body = "application/octet-stream", index.blobs[parts[1]]
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        return Handler


@pytest.fixture
def fake_index(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeIndex]:
    """The only index pip is configured with; pip itself must not run unless a test fakes it."""
    index = FakeIndex()
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # no pip.conf of this machine, nor its extra indexes
    monkeypatch.setenv("PIP_INDEX_URL", index.url)
    for variable in ("PIP_EXTRA_INDEX_URL", "PIP_NO_INDEX", "PIP_PROXY"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    monkeypatch.setenv("no_proxy", "127.0.0.1")

    def no_pip(*args: object) -> tuple[int, str]:
        raise AssertionError("--sdist must not run pip")

    monkeypatch.setattr(index_module, "_run_pip", no_pip)
    yield index
    index.close()


def release(tmp_path: Path, version: str, kind: str = "sdist") -> Path:
    """An sdist ``demo-pkg-VERSION.tar.gz`` or a wheel ``demo_pkg-VERSION-py3-none-any.whl`` in its own directory."""
    directory = tmp_path / "dist" / f"{kind}-{version}"
    directory.mkdir(parents=True)
    if kind == "wheel":
        return make_wheel(directory, version=version)
    return make_sdist(directory, top=f"demo-pkg-{version}")


def test_sdist_is_downloaded_from_the_json_page_then_reused(tmp_path: Path, fake_index: FakeIndex) -> None:
    fake_index.add(release(tmp_path, "1.0", "wheel"))
    fake_index.add(release(tmp_path, "1.0"))
    cache = tmp_path / "cache"
    observer = RecordingObserver()
    [package], _ = resolve_sources(["Demo_Pkg==1.0"], cache_dir=str(cache), observer=observer, sdist=True)
    assert (package.name, package.version, package.origin) == ("demo-pkg", "1.0", "Demo_Pkg==1.0")
    assert "csrc/gate.cu" in paths_of(package), "the sdist, not the wheel beside it"
    saved = cache / "downloads" / "demo-pkg" / "1.0" / "sdist"
    assert [p.name for p in saved.iterdir()] == ["demo-pkg-1.0.tar.gz"], "no temporary file is left"
    assert [path for path, _ in fake_index.requests] == ["/simple/demo-pkg/", "/files/demo-pkg-1.0.tar.gz"]
    assert "application/vnd.pypi.simple.v1+json" in fake_index.requests[0][1]
    assert len(observer.started) == observer.finished

    again = RecordingObserver()
    [reused], _ = resolve_sources(["demo-pkg==1.0"], cache_dir=str(cache), observer=again, sdist=True)
    assert "csrc/gate.cu" in paths_of(reused)
    assert len(fake_index.requests) == 2, "a pinned sdist in the cache is not fetched again"
    assert "using demo-pkg-1.0.tar.gz from the cache" in again.notes


def test_sdist_from_an_html_page_is_checked_against_the_url_fragment(
    tmp_path: Path, fake_index: FakeIndex
) -> None:
    fake_index.html_only = True
    fake_index.add(release(tmp_path, "1.0"))
    cache = tmp_path / "cache"
    [package], _ = resolve_sources(["demo-pkg==1.0"], cache_dir=str(cache), sdist=True)
    assert "csrc/gate.cu" in paths_of(package)
    assert (cache / "downloads" / "demo-pkg" / "1.0" / "sdist" / "demo-pkg-1.0.tar.gz").is_file()


@pytest.mark.parametrize("html_only", [False, True], ids=["json", "html"])
def test_sdist_that_does_not_match_the_listed_hash_leaves_nothing_behind(
    tmp_path: Path, fake_index: FakeIndex, html_only: bool
) -> None:
    fake_index.html_only = html_only
    fake_index.add(release(tmp_path, "1.0"), listed_sha256="0" * 64)
    cache = tmp_path / "cache"
    with pytest.raises(SourceError) as caught:
        resolve_sources(["demo-pkg==1.0"], cache_dir=str(cache), sdist=True)
    message = str(caught.value)
    assert message.startswith(
        "demo-pkg-1.0.tar.gz (the sdist of demo-pkg==1.0) does not match the sha256 the package index "
        "lists (0000000000000000…, got "
    )
    assert message.endswith(
        "so it was not kept; run again, and if it persists check the index or the proxy in between"
    )
    assert "\n" not in message
    assert not (cache / "downloads" / "demo-pkg").exists(), (
        "neither the bad file nor its directories are left"
    )


def test_version_without_an_sdist_lists_what_exists(tmp_path: Path, fake_index: FakeIndex) -> None:
    for version in ("1.0", "1.1", "2.1rc1"):
        fake_index.add(release(tmp_path, version))
    fake_index.add(release(tmp_path, "2.0", "wheel"))
    cache = tmp_path / "cache"
    with pytest.raises(SourceError) as only_wheel:
        resolve_sources(["demo-pkg==2.0"], cache_dir=str(cache), sdist=True)
    assert str(only_wheel.value) == (
        "demo-pkg==2.0 has no sdist on the package index, only demo_pkg-2.0-py3-none-any.whl; "
        "scan it without --sdist, or pass a source tree"
    )
    with pytest.raises(SourceError) as no_such_version:
        resolve_sources(["demo-pkg==9.9"], cache_dir=str(cache), sdist=True)
    assert str(no_such_version.value) == (
        "no sdist of demo-pkg==9.9 is on the package index; versions with an sdist: 1.0, 1.1 (and 1 more)"
    )
    with pytest.raises(SourceError, match=r"^no project zzz on the package index; check the spelling"):
        resolve_sources(["zzz==1.0"], cache_dir=str(cache), sdist=True)
    assert not (cache / "downloads").exists() or not any((cache / "downloads").iterdir())

    # Unpinned: the newest final release with an sdist; a pre-release only when nothing else matches.
    resolve_sources(["demo-pkg"], cache_dir=str(cache), sdist=True)
    resolve_sources(["demo-pkg>=2"], cache_dir=str(cache), sdist=True)
    saved = sorted(
        p.relative_to(cache / "downloads" / "demo-pkg").as_posix() for p in cache.rglob("*.tar.gz")
    )
    assert saved == ["1.1/sdist/demo-pkg-1.1.tar.gz", "2.1rc1/sdist/demo-pkg-2.1rc1.tar.gz"]


def test_unreachable_index_is_a_one_line_error_without_its_credentials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_index: FakeIndex
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    monkeypatch.setenv("PIP_INDEX_URL", f"http://user:s3cret@127.0.0.1:{port}/simple/")
    cache = tmp_path / "cache"
    with pytest.raises(SourceError) as caught:
        resolve_sources(["demo-pkg==1.0"], cache_dir=str(cache), sdist=True)
    assert str(caught.value) == (
        f"cannot reach the package index at http://127.0.0.1:{port}/simple/ to fetch the sdist of "
        "demo-pkg==1.0 (Connection refused); check the network, or pass a local sdist/directory"
    )
    assert not (cache / "downloads").exists()


def test_sdist_in_the_cache_is_used_offline(tmp_path: Path, fake_index: FakeIndex) -> None:
    fake_index.add(release(tmp_path, "1.0"))
    cache = tmp_path / "cache"
    resolve_sources(["demo-pkg==1.0"], cache_dir=str(cache), sdist=True)
    fake_index.close()
    served = len(fake_index.requests)

    observer = RecordingObserver()
    [package], _ = resolve_sources(
        ["demo-pkg==1.0"], cache_dir=str(cache), observer=observer, offline=True, sdist=True
    )
    assert "csrc/gate.cu" in paths_of(package)
    assert "using demo-pkg-1.0.tar.gz from the cache" in observer.notes
    [unpinned], _ = resolve_sources(["demo-pkg"], cache_dir=str(cache), offline=True, sdist=True)
    assert unpinned.version == "1.0"
    assert len(fake_index.requests) == served

    # What --sdist saved is not what a plain scan of the version gets, nor does a cached wheel stand in for an sdist.
    with pytest.raises(
        SourceError, match=r"^demo-pkg==1\.0 is not in the cache at .* and liftgate is offline"
    ):
        resolve_sources(["demo-pkg==1.0"], cache_dir=str(cache), offline=True)
    wheel_dir = cache / "downloads" / "demo-pkg" / "3.0"
    wheel_dir.mkdir()
    release(tmp_path, "3.0", "wheel").rename(wheel_dir / "demo_pkg-3.0-py3-none-any.whl")
    with pytest.raises(SourceError) as caught:
        resolve_sources(["demo-pkg==3.0"], cache_dir=str(cache), offline=True, sdist=True)
    assert str(caught.value) == (
        f"the sdist of demo-pkg==3.0 is not in the cache at {cache} and liftgate is offline; "
        "run once without --offline or pass a local sdist/directory"
    )


def test_file_index_among_the_extra_indexes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_index: FakeIndex
) -> None:
    """An extra index may be a local PEP 503 tree (``file://``); one that does not exist is passed over."""
    sdist = release(tmp_path, "1.0")
    local = tmp_path / "pypi"
    (local / "simple" / "demo-pkg").mkdir(parents=True)
    (local / "files").mkdir()
    sdist.rename(local / "files" / sdist.name)
    digest = hashlib.sha256((local / "files" / sdist.name).read_bytes()).hexdigest()
    (local / "simple" / "demo-pkg" / "index.html").write_text(
        f'<html><body><a href="../../files/{sdist.name}#sha256={digest}">{sdist.name}</a></body></html>\n'
    )
    missing = (tmp_path / "no-such-index" / "simple").as_uri()
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", f"{missing} {(local / 'simple').as_uri()}")
    cache = tmp_path / "cache"
    [package], _ = resolve_sources(["demo-pkg==1.0"], cache_dir=str(cache), sdist=True)
    assert "csrc/gate.cu" in paths_of(package)
    assert [path for path, _ in fake_index.requests] == ["/simple/demo-pkg/"], "asked the main index first"


def test_unpinned_without_a_wheel_takes_the_newest_sdist_and_reuses_it_by_hash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_index: FakeIndex
) -> None:
    for version in ("1.0", "1.1"):
        fake_index.add(release(tmp_path, version))
    pip = FakePip(tmp_path, (1, NO_WHEEL, None), (1, NO_WHEEL, None))
    monkeypatch.setattr(index_module, "_run_pip", pip)
    cache = tmp_path / "cache"
    latest = cache / "downloads" / "demo-pkg" / "latest"
    [package], _ = resolve_sources(["demo-pkg"], cache_dir=str(cache))
    assert "csrc/gate.cu" in paths_of(package)
    assert [p.name for p in latest.iterdir()] == ["demo-pkg-1.1.tar.gz"], "the newest, and no temporary file"
    served = len(fake_index.requests)

    observer = RecordingObserver()
    [again], _ = resolve_sources(["demo-pkg"], cache_dir=str(cache), observer=observer)
    assert "csrc/gate.cu" in paths_of(again)
    assert len(pip.commands) == 2, "an unpinned name always asks again"
    assert [path for path, _ in fake_index.requests[served:]] == ["/simple/demo-pkg/"], "the file is not"
    assert "using demo-pkg-1.1.tar.gz from the cache" in observer.notes


def test_index_settings_follow_pip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in list(os.environ):
        if variable.startswith("PIP_") or variable == "SSL_CERT_FILE":
            monkeypatch.delenv(variable)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    assert index_module.IndexSettings.from_pip() == index_module.IndexSettings()
    assert index_module.IndexSettings().urls == ("https://pypi.org/simple/",)

    config = tmp_path / "pip.conf"
    config.write_text(
        "[global]\nindex-url = https://mirror.example/simple\n"
        "extra-index-url =\n    file:///opt/pypi/simple\n    https://other.example/simple\n"
        "cert = /etc/ssl/custom.pem\ntimeout = 30\n"
        "[download]\ntimeout = 7\n"
    )
    monkeypatch.setenv("PIP_CONFIG_FILE", str(config))
    settings = index_module.IndexSettings.from_pip()
    assert settings.urls == (
        "https://mirror.example/simple",
        "file:///opt/pypi/simple",
        "https://other.example/simple",
    )
    assert (settings.cert, settings.timeout_s) == ("/etc/ssl/custom.pem", 7.0)

    monkeypatch.setenv("PIP_INDEX_URL", "https://env.example/simple/")
    assert index_module.IndexSettings.from_pip().index_url == "https://env.example/simple/"
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    assert index_module.IndexSettings.from_pip().urls == ()
    with pytest.raises(SourceError, match=r"^pip is configured not to use a package index \(no-index\)"):
        resolve_sources(["demo-pkg==1.0"], cache_dir=str(tmp_path / "cache"), sdist=True)


# --- cache location -------------------------------------------------------------------------


def test_cache_dir_argument_then_environment_then_user_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LIFTGATE_CACHE_DIR", str(tmp_path / "from-env"))
    assert cache_root(str(tmp_path / "explicit")) == str(tmp_path / "explicit")
    assert cache_root() == str(tmp_path / "from-env")
    monkeypatch.delenv("LIFTGATE_CACHE_DIR")
    import platformdirs

    assert cache_root() == os.path.abspath(platformdirs.user_cache_dir("liftgate"))

    monkeypatch.setenv("LIFTGATE_CACHE_DIR", str(tmp_path / "from-env"))
    resolve_sources([str(make_wheel(tmp_path))])
    assert (tmp_path / "from-env" / "unpacked").is_dir()


def test_unpinned_reuses_the_file_pip_reports_as_already_downloaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    latest = cache / "downloads" / "demo-pkg" / "latest"
    latest.mkdir(parents=True)
    for version in ("1.0", "3.0"):
        (tmp_path / version).mkdir()
        make_wheel(tmp_path / version, version=version).rename(
            latest / f"demo_pkg-{version}-py3-none-any.whl"
        )
    # The index's newest is 1.0 (3.0 was yanked, say): what pip reports wins over the newest file on disk.
    output = (
        f"Collecting demo-pkg\n  File was already downloaded {latest / 'demo_pkg-1.0-py3-none-any.whl'}\n"
    )
    monkeypatch.setattr(index_module, "_run_pip", FakePip(tmp_path, (0, output, None)))
    [package], _ = resolve_sources(["demo-pkg"], cache_dir=str(cache))
    assert package.version == "1.0"


def test_url_requirement_is_downloaded_by_liftgate_not_pip_nor_read_as_a_path(
    tmp_path: Path, fake_index: FakeIndex
) -> None:
    wheel = release(tmp_path, "1.2.3", "wheel")
    fake_index.add(wheel)
    spec = f"demo-pkg @ {fake_index.root}/files/{wheel.name}"
    cache = tmp_path / "cache"
    observer = RecordingObserver()
    [package], _ = resolve_sources([spec], cache_dir=str(cache), observer=observer, sdist=True)
    assert (package.name, package.version, package.origin) == ("demo-pkg", "1.2.3", spec)
    assert "demo_pkg/kernels/gate.cuh" in paths_of(package)
    assert [path for path, _ in fake_index.requests] == [f"/files/{wheel.name}"]
    [saved] = (cache / "downloads" / "demo-pkg" / "@url").glob(f"*/{wheel.name}")
    assert saved.read_bytes() == wheel.read_bytes()
    assert f"{spec} names a wheel, so --sdist does not apply to it: it is scanned as it is" in observer.notes


def test_pip_that_hangs_or_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def hang(*args: object, **kwargs: object) -> None:
        raise subprocess.TimeoutExpired(cmd="pip", timeout=index_module.PIP_TIMEOUT_S)

    monkeypatch.setattr(subprocess, "run", hang)
    with pytest.raises(
        SourceError, match=r"^pip did not finish fetching demo-pkg==1\.0 within 600 s; check the"
    ):
        resolve_sources(["demo-pkg==1.0"], cache_dir=str(tmp_path / "cache"))

    output = f"{sys.executable}: No module named pip\n"
    monkeypatch.setattr(index_module, "_run_pip", FakePip(tmp_path, (1, output, None)))
    with pytest.raises(
        SourceError, match=r"^pip is not available to .*, so demo-pkg==1\.0 cannot be fetched"
    ):
        resolve_sources(["demo-pkg==1.0"], cache_dir=str(tmp_path / "cache"))


def test_observer_tasks_are_started_and_finished_in_pairs(tmp_path: Path) -> None:
    site = make_site_packages(tmp_path / "lib" / "python3.11" / "site-packages")
    corrupt = tmp_path / "broken-1.0-py3-none-any.whl"
    corrupt.write_bytes(b"not a zip")
    observer = RecordingObserver()
    resolve_sources(
        [
            str(make_wheel(tmp_path)),
            str(make_sdist(tmp_path)),
            str(make_project(tmp_path / "checkout")),
            f"env:{site}",
        ],
        cache_dir=str(tmp_path / "cache"),
        observer=observer,
    )
    with pytest.raises(SourceError):
        resolve_sources([str(corrupt)], cache_dir=str(tmp_path / "cache"), observer=observer)
    # wheel, sdist, directory, environment; the corrupt wheel fails before its task starts
    assert len(observer.started) == observer.finished == 4
    assert observer.advanced >= 5 + 4 + 3 + 2  # wheel members, sdist members, project files, distributions
