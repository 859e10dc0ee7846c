"""One test per finding of the hostile-input review: each failed before its fix.

Archives (non-UTF-8 names, 2,100-deep paths, zip and tar bombs), trees (non-UTF-8 names,
FIFOs where metadata should be, symlinks out of the tree), environments (an editable install
pointing at /proc, RECORD entries outside the prefix), ELF files (a fat binary section at an
offset past 2^63, a section claiming 8 GB of a sparse file), reports that must render any path,
and ``trace``/``verify`` timeouts that must not leave a shell command's children running.
Hangs are caught by a generous safety net (`hostile_files.safety_net`), never by a timing bound.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest

from hostile_files import (
    Member,
    measured,
    process_alive,
    read_pid,
    safety_net,
    synthetic_elf,
    wait_until,
    write_tar,
    write_tar_stream,
    write_zip,
    write_zip_bomb,
)
from liftgate.detect.binary import FatbinError, read_kernel_images, summarize
from liftgate.model import GateKind, Report, Skip
from liftgate.report import OutputFormat, RenderOptions, Show, render
from liftgate.scan import scan
from liftgate.sources import SourceError, resolve_sources
from liftgate.sources import archive as archive_module
from liftgate.sources.archive import open_archive
from liftgate.sources.environment import resolve_site_packages
from liftgate.sources.tree import walk_tree

pytestmark = pytest.mark.skipif(
    sys.platform != "linux", reason="FIFOs, /proc and process groups as Linux has them"
)

GATE_CU = b"#if __CUDA_ARCH__ >= 900\nint hopper;\n#endif\n"
PY_GATE = b"import torch\nif torch.cuda.get_device_capability() >= (9, 0):\n    x = 1\n"


def render_all(report: Report) -> dict[str, str]:
    """Every format of ``report``, each checked to be encodable (what writing it to a file needs)."""
    out = {}
    for fmt in OutputFormat:
        text = render(
            report, fmt, RenderOptions(show=Show.ALL, verbose=True, color=fmt is OutputFormat.TABLE)
        )
        text.encode("utf-8")  # strict: a lone surrogate would raise here
        out[fmt.value] = text
    json.loads(out["json"])
    json.loads(out["sarif"])
    return out


def unpacked_leftovers(cache: Path) -> list[str]:
    root = cache / "unpacked"
    return sorted(n for n in os.listdir(root) if n != ".digests") if root.is_dir() else []


# --- non-UTF-8 names ------------------------------------------------------------------------


def test_tar_member_with_a_non_utf8_name_is_scanned_and_every_format_renders_it(tmp_path: Path) -> None:
    sdist = tmp_path / "odd-1.0.tar.gz"
    write_tar(
        str(sdist),
        [
            Member(b"odd-1.0/caf\xe9/k\xff.cu", data=GATE_CU),
            Member(b"odd-1.0/ok.py"),
            Member(b"odd-1.0/../../evil\xfe", data=b"x"),
        ],
    )
    report = scan([str(sdist)], ["sm_120"], use_cache=False, cache_dir=str(tmp_path / "cache"))
    gate = next(g for g in report.gates if g.kind is GateKind.CUDA_PP)
    assert gate.location.path == "caf\\xe9/k\\xff.cu"
    assert any(s.path == "odd-1.0/../../evil\\xfe" and "unsafe path" in s.reason for s in report.skips)
    texts = render_all(report)
    assert "caf\\xe9/k\\xff.cu" in texts["table"] and "caf\\\\xe9/k\\\\xff.cu" in texts["json"]


def test_zip_names_that_are_not_utf8_are_read_or_a_clear_source_error(tmp_path: Path) -> None:
    plain = tmp_path / "odd-1.0.zip"  # no UTF-8 flag: read as cp437, as zipfile does
    write_zip(str(plain), [Member(b"odd-1.0/caf\xe9.cu", data=GATE_CU), Member(b"odd-1.0/ok.py")])
    [package], _ = resolve_sources([str(plain)], cache_dir=str(tmp_path / "cache"))
    assert {f.path for f in package.files} == {"caf\u0398.cu", "ok.py"}
    flagged = tmp_path / "flagged-1.0.zip"  # flagged UTF-8, but the bytes are not
    write_zip(str(flagged), [Member(b"flagged-1.0/caf\xe9.cu", data=GATE_CU)], utf8_flag=True)
    with pytest.raises(SourceError) as caught:
        resolve_sources([str(flagged)], cache_dir=str(tmp_path / "cache"))
    message = str(caught.value)
    assert "\n" not in message and str(flagged) in message
    assert "not valid UTF-8" in message and "unpack it yourself" in message


def test_tree_with_non_utf8_file_and_directory_names_is_scanned_and_rendered(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    (root / "caf\udce9").mkdir(parents=True)
    (root / "caf\udce9" / "k\udcff.cu").write_bytes(GATE_CU)
    (root / "x\udcfe.py").write_bytes(PY_GATE)
    (root / "esc\x1b[2J.cu").write_bytes(GATE_CU)
    [package], _ = resolve_sources([str(root)])
    by_path = {f.path: f for f in package.files}
    assert set(by_path) == {"caf\\xe9/k\\xff.cu", "x\\xfe.py", "esc\\x1b[2J.cu"}
    assert os.path.isfile(by_path["caf\\xe9/k\\xff.cu"].fspath)  # the real name, to read the bytes
    report = scan([str(root)], ["sm_120"], use_cache=False)
    assert {g.location.path for g in report.gates} >= {"caf\\xe9/k\\xff.cu", "x\\xfe.py", "esc\\x1b[2J.cu"}
    texts = render_all(report)
    assert all("\x1b[2J" not in text for text in texts.values())


@pytest.mark.parametrize("form", ["directory", "file"])
def test_a_source_named_in_bytes_that_are_not_utf8_is_scanned(tmp_path: Path, form: str) -> None:
    # The spec itself (not a file inside it) is a non-UTF-8 name: package name and origin too.
    if form == "directory":
        spec = tmp_path / "d\udce9"
        spec.mkdir()
        (spec / "k.cu").write_bytes(GATE_CU)
    else:
        spec = tmp_path / "f\udce9.cu"
        spec.write_bytes(GATE_CU)
    report = scan([str(spec)], ["sm_120"], use_cache=False)
    (package,) = report.packages
    assert package.name in ("d\\xe9", "f\\xe9") and "\\xe9" in package.origin
    assert report.gates
    texts = render_all(report)
    json.loads(texts["json"])


def test_an_escaped_name_that_collides_with_a_real_one_is_a_skip(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    root.mkdir()
    (root / "caf\udce9.cu").write_bytes(GATE_CU)
    (root / "caf\\xe9.cu").write_bytes(b"")
    files, skips = walk_tree(str(root), package="t", version=None)
    assert [f.path for f in files] == ["caf\\xe9.cu"] and files[0].fspath.endswith("caf\\xe9.cu")
    assert [s.path for s in skips] == ["caf\\xe9.cu"] and "same name" in skips[0].reason


def test_reports_render_surrogates_and_control_characters_safely() -> None:
    report = Report(
        targets=(),
        packages=(),
        gates=(),
        skips=(
            Skip("bad\udce9/name.cu", "odd \udcff reason\x1b]0;title\x07", "pkg\x1b[31m"),
            Skip("pipe|`tick`\n.cu", "reason", None),
        ),
        files_scanned=2,
        elapsed_s=0.0,
        cuda_version=(13, 0),
        notes=("a note with \udce9 and \x1b[2J",),
    )
    texts = render_all(report)
    for fmt, text in texts.items():
        assert "\x1b]" not in text and "\x07" not in text and "\x1b[2J" not in text, fmt
    assert "bad\\xe9/name.cu" in texts["table"] and "bad\\xe9/name.cu" in texts["markdown"]
    data = json.loads(texts["json"])
    assert {s["path"] for s in data["skips"]} >= {"bad\\xe9/name.cu"}


# --- deep paths -----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["tar", "zip"])
def test_archive_member_2100_directories_deep_is_a_skip(tmp_path: Path, kind: str) -> None:
    deep = b"deep-1.0/" + b"a/" * 2100 + b"f.py"
    members = [Member(deep, data=b"x = 1\n"), Member(b"deep-1.0/ok.py")]
    path = tmp_path / f"deep-1.0.{'tar.gz' if kind == 'tar' else 'zip'}"
    (write_tar if kind == "tar" else write_zip)(str(path), members)
    package, skips = open_archive(str(path), origin=str(path), cache_root=str(tmp_path / "cache"))
    assert [f.path for f in package.files] == ["ok.py"]
    [skip] = skips
    assert "deep" in skip.reason and len(skip.path) < 400


# --- unpack budget --------------------------------------------------------------------------


def test_zip_bomb_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb-1.0.zip"
    write_zip_bomb(str(bomb), 300 << 20)  # 300 MiB of zeros in ~300 KB
    assert bomb.stat().st_size < 2 << 20
    with measured() as cost, pytest.raises(SourceError) as caught:
        resolve_sources([str(bomb)], cache_dir=str(tmp_path / "cache"))
    message = str(caught.value)
    assert "\n" not in message and str(bomb) in message
    assert "200:1" in message and "unpack it yourself" in message
    assert unpacked_leftovers(tmp_path / "cache") == []
    assert cost.read is None or cost.read < 64 << 20  # never inflated


def test_tar_bomb_stops_at_the_budget_and_leaves_nothing_behind(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb-1.0.tar.gz"
    write_tar_stream(str(bomb), "bomb-1.0/zeros.bin", 300 << 20)  # refused from its header
    with pytest.raises(SourceError) as caught:
        resolve_sources([str(bomb)], cache_dir=str(tmp_path / "cache"))
    assert "200:1" in str(caught.value) and "unpack it yourself" in str(caught.value)
    assert unpacked_leftovers(tmp_path / "cache") == []
    # Padded with 2 MB of noise, the whole archive is under 200:1: the bytes read so far are not.
    padded = tmp_path / "padded-1.0.tar.gz"
    write_tar_stream(str(padded), "padded-1.0/zeros.bin", 300 << 20, tail=os.urandom(2 << 20))
    assert 200 * padded.stat().st_size > (300 << 20)
    with pytest.raises(SourceError, match=r"200:1 of the first .*written so far") as caught:
        resolve_sources([str(padded)], cache_dir=str(tmp_path / "cache"))
    assert unpacked_leftovers(tmp_path / "cache") == []


def test_member_count_and_member_size_limits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(archive_module, "MAX_MEMBERS", 10, raising=False)
    many = tmp_path / "many-1.0.zip"
    write_zip(str(many), [Member(f"many-1.0/f{i}.py".encode()) for i in range(11)])
    with pytest.raises(SourceError, match="more than 10 members"):
        resolve_sources([str(many)], cache_dir=str(tmp_path / "cache"))
    monkeypatch.setattr(archive_module, "MAX_MEMBER_BYTES", 1000, raising=False)
    big = tmp_path / "big-1.0.tar.gz"
    write_tar(str(big), [Member(b"big-1.0/big.bin", data=os.urandom(1001))])
    with pytest.raises(SourceError, match="bigger than 1,000 bytes"):
        resolve_sources([str(big)], cache_dir=str(tmp_path / "cache"))
    assert unpacked_leftovers(tmp_path / "cache") == []


@pytest.mark.parametrize(
    ("archive_size", "members", "largest", "total"),
    [
        (900 << 20, 16_000, 1_700 << 20, 3_800 << 20),  # a torch CUDA wheel
        (2_300 << 20, 300, 2_600 << 20, 5_200 << 20),  # TensorRT's libraries
        (60 << 20, 25_000, 40 << 20, 600 << 20),  # a flashinfer or vLLM sdist with its vendored sources
        (3 << 20, 4_000, 1 << 20, 250 << 20),  # small but very compressible: under the ratio's floor
    ],
)
def test_the_budget_lets_real_releases_through(
    archive_size: int, members: int, largest: int, total: int
) -> None:
    budget = archive_module.UnpackBudget("x.whl", archive_size)
    budget.member("big", largest, compressed=largest // 3)
    per = (total - largest) // (members - 1)
    for i in range(members - 1):
        budget.member(f"m{i}", per, compressed=per // 4)


# --- environments ---------------------------------------------------------------------------


def make_dist(site: Path, name: str, record: str, **files: str) -> Path:
    dist = site / f"{name}-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n\n")
    (dist / "RECORD").write_text(record)
    for filename, text in files.items():
        (dist / filename).write_text(text)
    return dist


def test_editable_install_pointing_at_proc_is_a_skip_and_proc_is_never_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "env" / "lib" / "python3.11" / "site-packages"
    url = json.dumps({"url": "file:///proc", "dir_info": {"editable": True}})
    make_dist(site, "evil", "evil-1.0.dist-info/METADATA,,\n", **{"direct_url.json": url})
    real_scandir = os.scandir
    listed: list[str] = []

    def scandir(path: Any = ".") -> Any:
        listed.append(os.fspath(path))
        if os.path.realpath(path).startswith(("/proc", "/sys", "/dev")):
            raise AssertionError(f"listed {path}")
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    packages, skips = resolve_site_packages(str(site))
    assert [p.name for p in packages] == ["evil"]
    assert any(s.path == "/proc" and "system directory" in s.reason for s in skips)
    monkeypatch.undo()
    files, tree_skips = walk_tree("/proc", package="p", version=None)
    assert files == [] and "system directory" in tree_skips[0].reason


def test_fifos_where_metadata_should_be_are_never_opened(tmp_path: Path) -> None:
    site = tmp_path / "env" / "lib" / "python3.11" / "site-packages"
    dist = make_dist(site, "fifo", "fifo/x.py,,\n")
    (dist / "METADATA").unlink()
    os.mkfifo(dist / "METADATA")
    os.mkfifo(dist / "direct_url.json")
    (site / "fifo").mkdir()
    (site / "fifo" / "x.py").write_text("")
    other = make_dist(site, "other", "")
    (other / "RECORD").unlink()
    os.mkfifo(other / "RECORD")
    tree = tmp_path / "tree"
    tree.mkdir()
    for name in ("pyproject.toml", "setup.cfg", "PKG-INFO"):
        os.mkfifo(tree / name)
    os.mkfifo(tmp_path / "pipe.so")
    (tree / "lib.so").symlink_to(tmp_path / "pipe.so")
    with safety_net(120):
        packages, skips = resolve_site_packages(str(site))
        [package], tree_skips = resolve_sources([str(tree)])
        with pytest.raises(FatbinError, match="not a regular file"):
            read_kernel_images(str(tmp_path / "pipe.so"))
    assert [(p.name, [f.path for f in p.files]) for p in packages] == [("fifo", ["fifo/x.py"])]
    assert any(s.path == "other-1.0.dist-info/RECORD" for s in skips)
    assert package.name == "tree" and package.files == ()
    assert {s.path for s in tree_skips} >= {"pyproject.toml", "lib.so"}


def test_record_entries_outside_the_prefix_are_skips(tmp_path: Path) -> None:
    prefix = tmp_path / "env"
    site = prefix / "lib" / "python3.11" / "site-packages"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "tool").write_text("#!/bin/sh\n")
    secret = tmp_path / "secret.cu"
    secret.write_bytes(GATE_CU)
    record = (
        "../../../bin/tool,,\n"
        f"../../../../secret.cu,,\n"
        f"{secret},,\n"
        "pkg/../../../../../secret.cu,,\n"
        "evil-1.0.dist-info/METADATA,,\n"
    )
    make_dist(site, "evil", record)
    [package], skips = resolve_site_packages(str(site))
    assert {f.path for f in package.files} == {"../../../bin/tool", "evil-1.0.dist-info/METADATA"}
    outside = {s.path: s.reason for s in skips}
    for entry in ("../../../../secret.cu", str(secret), "pkg/../../../../../secret.cu"):
        assert outside[entry].startswith("listed in evil-1.0.dist-info/RECORD but outside the environment")


# --- trees ----------------------------------------------------------------------------------


def test_symlinks_out_of_the_tree_are_not_followed(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    root.mkdir()
    (tmp_path / "secret.cu").write_bytes(GATE_CU)
    (root / "leak.cu").symlink_to(tmp_path / "secret.cu")
    (root / "etc").symlink_to("/etc")
    (root / "inside.cu").symlink_to(root / "real.cu")
    (root / "real.cu").write_bytes(GATE_CU)
    files, skips = walk_tree(str(root), package="t", version=None)
    assert sorted(f.path for f in files) == ["inside.cu", "real.cu"]
    reasons = {s.path: s.reason for s in skips}
    assert "out of the tree" in reasons["leak.cu"] and "out of the tree" in reasons["etc"]


# --- ELF and fat binaries -------------------------------------------------------------------


def test_the_synthetic_elf_reads_like_nvcc_output(tmp_path: Path) -> None:
    path = tmp_path / "k.so"
    path.write_bytes(synthetic_elf().data)
    assert summarize(read_kernel_images(str(path))) == "SASS sm_80, sm_90a; PTX compute_80 (ISA 9.8)"


def test_fatbin_section_offset_past_2_63_is_a_skip(tmp_path: Path) -> None:
    elf = synthetic_elf()
    elf.set("fatbin.sh_offset", 1 << 63)
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "k.so").write_bytes(elf.data)
    with pytest.raises(FatbinError, match="past the end of the file"):
        read_kernel_images(str(pkg / "k.so"))
    report = scan([str(pkg)], ["sm_120"], use_cache=False)
    [skip] = [s for s in report.skips if s.path == "k.so"]
    assert skip.reason.startswith("binary not read:")


def test_fatbin_section_claiming_8_gb_of_a_sparse_file_is_read_in_bounded_steps(tmp_path: Path) -> None:
    elf = synthetic_elf()
    elf.set("fatbin.sh_size", 8 << 30)
    path = tmp_path / "big.so"
    with open(path, "wb") as fh:
        fh.write(elf.data)
        fh.truncate(elf.fatbin_offset + (8 << 30))  # sparse: 8 GB long, a few KB on disk
    with safety_net(300), measured() as cost:
        try:
            images = read_kernel_images(str(path))
        except FatbinError as exc:
            assert "no fat binary container" in str(exc)
        else:
            assert summarize(images) == "SASS sm_80, sm_90a; PTX compute_80 (ISA 9.8)"
    assert cost.read is None or cost.read < 8 << 20
    assert cost.peak < 8 << 20
    small = tmp_path / "small.so"
    small.write_bytes(elf.data)  # the same claim in a small file: past its end
    with pytest.raises(FatbinError, match="past the end of the file"):
        read_kernel_images(str(small))


def test_section_table_claims_are_checked_against_the_file(tmp_path: Path) -> None:
    for name, value in (
        ("e_shoff", (1 << 64) - 1),
        ("e_shnum", 0),  # then the count is section 0's sh_size
        ("e_shstrndx", 0xFFFF),  # then the index is section 0's sh_link
        ("strtab.sh_offset", 1 << 63),
        ("fatbin.sh_name", 0xFFFFFFFF),
    ):
        elf = synthetic_elf()
        elf.set(name, value)
        if name == "e_shnum":
            elf.set("null.sh_size", 1 << 40)
        if name == "e_shstrndx":
            elf.set("null.sh_link", 0xFFFFFFF0)
        path = tmp_path / f"{name}.so"
        path.write_bytes(elf.data)
        with measured() as cost:
            try:
                images = read_kernel_images(str(path))
            except FatbinError:
                images = None
        assert images in (None, []), name  # an error, or no fat binary section found
        assert cost.read is None or cost.read < 1 << 20, name


# --- trace and verify timeouts --------------------------------------------------------------


def _shell_with_grandchild(pidfile: Path) -> list[str]:
    return ["sh", "-c", f"sleep 300 & echo $! > {pidfile}; sleep 300"]


def _kill(pid: int | None) -> None:
    if pid is not None and process_alive(pid):
        os.kill(pid, signal.SIGKILL)


def test_trace_timeout_stops_the_whole_process_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from liftgate.trace import session

    monkeypatch.setattr(
        session, "GRACE_S", 1.0, raising=False
    )  # a background job ignores the SIGINT: SIGTERM sooner
    pidfile = tmp_path / "grandchild.pid"
    pid = None
    try:
        with safety_net(240):
            run = session.run_traced(_shell_with_grandchild(pidfile), timeout=2)
        pid = read_pid(str(pidfile))
        assert any("ran past 2 s" in note for note in run.trace.notes)
        assert wait_until(lambda: not process_alive(pid)), f"grandchild {pid} still running"
    finally:
        _kill(pid)


# Run in a fresh interpreter: in the full suite, an earlier test leaves the pytest process in a
# state where a SIGINT sent to itself never becomes a KeyboardInterrupt (both tests pass alone and
# in every subset tried; the full run hung 240 s). The behaviour under test is liftgate's, so it is
# checked where nothing else has touched the process's signals.
_CTRL_C_CHILD = r"""
import json, os, signal, sys, threading, time
from liftgate.trace import session
# As a terminal gives it: SIGINT neither ignored nor blocked (both are inherited through exec, and
# the suite's process has one or the other by the time this runs).
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
signal.signal(signal.SIGINT, signal.default_int_handler)
session.GRACE_S = 1.0
pidfile, to_self = sys.argv[1], sys.argv[2] == "thread"
command = ["sh", "-c", f"sleep 300 & echo $! > {pidfile}; sleep 300"]
def fire():
    for _ in range(600):
        if os.path.exists(pidfile) and open(pidfile).read().strip():
            break
        time.sleep(0.05)
    if to_self:  # the signal lands on this helper thread, not on the main one
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)
    else:
        os.kill(os.getpid(), signal.SIGINT)
threading.Thread(target=fire, daemon=True).start()
run = session.run_traced(command)
print(json.dumps(list(run.trace.notes)))
"""


def _ctrl_c_in_a_fresh_process(tmp_path: Path, where: str) -> None:
    pidfile = tmp_path / "grandchild.pid"
    pid = None
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CTRL_C_CHILD, str(pidfile), where],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        pid = read_pid(str(pidfile))
        notes = json.loads(done.stdout.strip().splitlines()[-1])
        assert any("interrupted (Ctrl-C)" in note for note in notes), notes
        assert wait_until(lambda: not process_alive(pid)), f"grandchild {pid} still running"
    finally:
        _kill(pid)


def test_trace_forwards_ctrl_c_to_the_process_group(tmp_path: Path) -> None:
    _ctrl_c_in_a_fresh_process(tmp_path, "process")


def test_a_ctrl_c_caught_by_another_thread_still_stops_the_trace(tmp_path: Path) -> None:
    """A process-directed SIGINT lands on any thread. Sent to a helper thread itself, it runs
    Python's handler while the main thread waits for the command: the wait must come back to
    Python (in slices) for the Ctrl-C to take effect, not wait 300 s."""
    _ctrl_c_in_a_fresh_process(tmp_path, "thread")


class _NoTelemetry:
    def __enter__(self) -> _NoTelemetry:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def summary(self) -> dict[str, Any]:
        return {}


def test_verify_timeout_stops_the_whole_process_group(tmp_path: Path) -> None:
    from liftgate.verify.runner import Options, run_command

    pidfile = tmp_path / "grandchild.pid"
    pid = None
    opts = Options(
        command=["sh", "-c", f"echo started; sleep 300 & echo $! > {pidfile}; sleep 300"],
        timeout_s=2,
        workdir=str(tmp_path / "verify"),
    )
    try:
        with safety_net(240):
            run = run_command(opts, "stock", 0, False, dict(os.environ), _NoTelemetry)  # type: ignore[arg-type]
        pid = read_pid(str(pidfile))
        assert run.failure == "timed out after 2 s" and run.returncode == -9
        assert "started" in Path(run.log).read_text()
        assert wait_until(lambda: not process_alive(pid)), f"grandchild {pid} still running"
    finally:
        _kill(pid)


def test_archive_module_still_refuses_links_devices_fifos_and_escapes(tmp_path: Path) -> None:
    members = [
        Member(b"keep-1.0/ok.py"),
        Member(b"keep-1.0/link", "symlink"),
        Member(b"keep-1.0/hard", "hardlink"),
        Member(b"keep-1.0/pipe", "fifo"),
        Member(b"keep-1.0/dev", "chardev"),
        Member(b"/abs.py", data=b"x"),
        Member(b"keep-1.0/../../up.py", data=b"x"),
    ]
    for suffix, write in (("tar.gz", write_tar), ("zip", write_zip)):
        path = tmp_path / f"keep-1.0.{suffix}"
        kept = [m for m in members if suffix != "zip" or m.kind != "hardlink"]  # zip has no hard links
        write(str(path), kept)
        package, skips = open_archive(str(path), origin=str(path), cache_root=str(tmp_path / "cache"))
        assert [f.path for f in package.files] == ["ok.py"], suffix
        assert len(skips) == len(kept) - 1, (suffix, skips)
        assert not (tmp_path / "up.py").exists() and not Path("/abs.py").exists()


def test_tarfile_gnu_sparse_and_long_headers_are_bounded(tmp_path: Path) -> None:
    """A GNU long-name header claiming 512 MB must not be read into memory."""
    path = tmp_path / "long-1.0.tar"
    info = tarfile.TarInfo("././@LongLink")
    info.type = tarfile.GNUTYPE_LONGNAME
    info.size = 512 << 20
    with open(path, "wb") as fh:
        fh.write(info.tobuf(format=tarfile.USTAR_FORMAT))
        fh.truncate(512 + (512 << 20) + 1024)  # sparse zeros as the "name"
    with measured() as cost, pytest.raises(SourceError) as caught:
        open_archive(str(path), origin=str(path), cache_root=str(tmp_path / "cache"))
    assert str(path) in str(caught.value) and "a header claims 512 MiB" in str(caught.value)
    assert cost.peak < 64 << 20
    assert zipfile.is_zipfile(path) is False
