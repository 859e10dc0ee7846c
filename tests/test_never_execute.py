"""liftgate never executes what it scans: no spec form may let pip (or anything else) build an sdist.

The attack: a release whose only file is an sdist with a ``setup.py`` (or an in-tree build backend)
that does something when run. Preparing an sdist's metadata runs that code, which ``pip download``
does for every sdist it saves, so liftgate asks pip for wheels only (``--only-binary=:all:``) and
takes sdists and ``name @ url`` archives with its own client. Each test builds a local PEP 503
``file://`` index in ``tmp_path`` whose only release is such an sdist (pip sees it through
``PIP_INDEX_URL`` too), scans it through the CLI, and checks both that the payload never ran and
that the sdist really was scanned (its ``__CUDA_ARCH__`` gate is in the report). HTTP URLs are
served on 127.0.0.1 only.
"""

from __future__ import annotations

import hashlib
import inspect
import io
import itertools
import json
import os
import tarfile
import threading
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from liftgate.cli.main import main
from liftgate.sources import NullObserver, SourceError, resolve_sources
from liftgate.sources import index as index_module
from liftgate.sources.index import FetchRequest

GATE_CU = b"#if __CUDA_ARCH__ >= 900\n__device__ void hopper_only() {}\n#endif\n"
GATE_CONDITION = "__CUDA_ARCH__ >= 900"
SDIST = "evilpkg-1.0.tar.gz"


def _payload(marker: Path) -> str:
    """Python that leaves ``marker`` behind (with its argv) whenever it runs."""
    return f"import sys\nwith open({str(marker)!r}, 'a') as _out:\n    _out.write(repr(sys.argv) + '\\n')\n"


def sdist_members(marker: Path, backend: str) -> dict[str, bytes]:
    """The files of evilpkg 1.0's source tree: a kernel with a gate and a build that writes ``marker``.

    ``backend`` "setuptools": a ``setup.py`` run by setuptools' backend; "in-tree": a build backend
    shipped in the sdist itself (``backend-path``), which runs without anything installed."""
    members = {
        "PKG-INFO": b"Metadata-Version: 2.1\nName: evilpkg\nVersion: 1.0\n\n",
        "csrc/gate.cu": GATE_CU,
        "evilpkg/__init__.py": b"",
    }
    if backend == "setuptools":
        members["pyproject.toml"] = (
            b'[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        )
        members["setup.py"] = (
            _payload(marker) + "from setuptools import setup\nsetup(name='evilpkg', version='1.0')\n"
        ).encode()
    else:
        members["pyproject.toml"] = (
            b'[build-system]\nrequires = []\nbuild-backend = "evil_backend"\nbackend-path = ["."]\n'
        )
        members["evil_backend.py"] = (_payload(marker) + "raise SystemExit('payload ran')\n").encode()
    return members


def write_sdist(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(f"evilpkg-1.0/{name}")
            info.size = len(data)
            info.mtime = 1_700_000_000
            archive.addfile(info, io.BytesIO(data))
    return path


class Evil:
    """A ``file://`` PEP 503 index in ``root`` whose only release of evilpkg is a booby-trapped sdist."""

    def __init__(self, root: Path, backend: str) -> None:
        self.root = root
        self.marker = root / "PAYLOAD-RAN"
        self.cache = root / "cache"
        members = sdist_members(self.marker, backend)
        files = root / "index" / "files"
        files.mkdir(parents=True)
        self.sdist = write_sdist(files / SDIST, members)
        self.sha256 = hashlib.sha256(self.sdist.read_bytes()).hexdigest()
        project = root / "index" / "simple" / "evilpkg"
        project.mkdir(parents=True)
        (project / "index.html").write_text(
            f'<!DOCTYPE html><html><body><a href="../../files/{SDIST}#sha256={self.sha256}">{SDIST}</a>'
            "</body></html>\n"
        )
        self.simple_url = (root / "index" / "simple").as_uri()
        # The same tree unpacked, for directory specs.
        self.tree = root / "tree" / "evilpkg-1.0"
        for name, data in members.items():
            (self.tree / name).parent.mkdir(parents=True, exist_ok=True)
            (self.tree / name).write_bytes(data)

    def scan(self, *args: str) -> tuple[int, dict[str, object]]:
        """``liftgate scan ARGS`` into a JSON report: (exit code, report or {})."""
        out = self.root / "report.json"
        out.unlink(missing_ok=True)
        options = ["--target", "sm_80", "--cache-dir", str(self.cache), "--format", "json", "-o", str(out)]
        code = main(["scan", *args, *options, "-q", "-j", "1", "--no-judge"])
        return code, json.loads(out.read_text()) if out.exists() else {}

    def assert_scanned_without_running(self, code: int, report: dict[str, object], stderr: str) -> None:
        assert not self.marker.exists(), f"the sdist's build ran: {self.marker.read_text()!r}"
        assert code == 0, stderr
        gates = report["gates"]
        assert isinstance(gates, list)
        found = {(g["package"], g["path"], g["condition"]) for g in gates}
        assert ("evilpkg", "csrc/gate.cu", GATE_CONDITION) in found, "the sdist must really be scanned"


def _pip_env(monkeypatch: pytest.MonkeyPatch, simple_url: str) -> None:
    """pip (the subprocess) and liftgate (in this process) both see only the local index."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", simple_url)
    for variable in ("PIP_EXTRA_INDEX_URL", "PIP_NO_INDEX", "PIP_FIND_LINKS", "PIP_PROXY", "PIP_NO_BINARY"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    monkeypatch.delenv("LIFTGATE_CACHE_DIR", raising=False)


class Notes(NullObserver):
    def __init__(self) -> None:
        self.notes: list[str] = []

    def note(self, message: str) -> None:
        self.notes.append(message)


class PipCalls:
    """Wraps `index._run_pip`: records every command, then runs it for real."""

    def __init__(self) -> None:
        self.commands: list[list[str]] = []
        self._run = index_module._run_pip

    def __call__(self, command: Sequence[str], cwd: str, spec: str) -> tuple[int, str]:
        self.commands.append(list(command))
        return self._run(command, cwd, spec)


@pytest.fixture
def pip_calls(monkeypatch: pytest.MonkeyPatch) -> PipCalls:
    calls = PipCalls()
    monkeypatch.setattr(index_module, "_run_pip", calls)
    return calls


def evil_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str = "setuptools") -> Evil:
    evil = Evil(tmp_path, backend)
    _pip_env(monkeypatch, evil.simple_url)
    return evil


SPEC_FORMS = {
    "pinned": lambda e: ["evilpkg==1.0"],
    "unpinned": lambda e: ["evilpkg"],
    "pinned --sdist": lambda e: ["evilpkg==1.0", "--sdist"],
    "url to the sdist": lambda e: [f"evilpkg @ {e.sdist.as_uri()}"],
    "url to the sdist --sdist": lambda e: [f"evilpkg @ {e.sdist.as_uri()}", "--sdist"],
    "url to a directory": lambda e: [f"evilpkg @ {e.tree.as_uri()}"],
    "url to a directory --sdist": lambda e: [f"evilpkg @ {e.tree.as_uri()}", "--sdist"],
}


@pytest.mark.parametrize("form", list(SPEC_FORMS))
def test_no_spec_form_runs_the_sdists_build(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    pip_calls: PipCalls,
    form: str,
) -> None:
    evil = evil_index(tmp_path, monkeypatch)
    code, report = evil.scan(*SPEC_FORMS[form](evil))
    evil.assert_scanned_without_running(code, report, capsys.readouterr().err)
    for command in pip_calls.commands:
        assert "--only-binary=:all:" in command, command
        assert not any("@" in arg for arg in command), "a URL is never handed to pip"


@pytest.mark.parametrize("form", ["pinned", "unpinned", "url to the sdist", "url to a directory"])
def test_an_in_tree_build_backend_is_not_run_either(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], form: str
) -> None:
    evil = evil_index(tmp_path, monkeypatch, backend="in-tree")
    code, report = evil.scan(*SPEC_FORMS[form](evil))
    evil.assert_scanned_without_running(code, report, capsys.readouterr().err)


def test_pips_own_no_binary_setting_does_not_undo_only_binary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--only-binary=:all:`` on the command line wins over a ``no-binary`` in pip's configuration."""
    evil = evil_index(tmp_path, monkeypatch)
    monkeypatch.setenv("PIP_NO_BINARY", ":all:")
    code, report = evil.scan("evilpkg==1.0")
    evil.assert_scanned_without_running(code, report, capsys.readouterr().err)


def test_requirements_pips_settings_would_add_are_not_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """pip builds what ``requirement``/``editable`` add, ``--only-binary`` or not: liftgate keeps them out."""
    evil = evil_index(tmp_path, monkeypatch)
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(f"{evil.sdist}\n")
    monkeypatch.setenv("PIP_REQUIREMENT", str(requirements))
    monkeypatch.setenv("PIP_EDITABLE", str(evil.tree))
    code, report = evil.scan("evilpkg==1.0")
    evil.assert_scanned_without_running(code, report, capsys.readouterr().err)

    monkeypatch.delenv("PIP_REQUIREMENT")
    monkeypatch.delenv("PIP_EDITABLE")
    config = tmp_path / "pip.conf"
    config.write_text(f"[download]\nrequirement = {requirements}\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(config))
    with pytest.raises(SourceError) as caught:
        resolve_sources(["evilpkg==1.0"], cache_dir=str(tmp_path / "other-cache"))
    assert str(caught.value) == (
        f"pip's configuration adds {requirements} to every download (requirement in its [download] section), "
        "which pip would build, so liftgate does not run pip to fetch evilpkg==1.0; remove that setting, "
        "or pass a local wheel/directory"
    )
    assert not evil.marker.exists()


def test_the_sdist_taken_for_want_of_a_wheel_is_said_once_and_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    evil = evil_index(tmp_path, monkeypatch)
    observer = Notes()
    [package], _ = resolve_sources(["evilpkg==1.0"], cache_dir=str(evil.cache), observer=observer)
    assert "csrc/gate.cu" in {f.path for f in package.files}
    said = [note for note in observer.notes if "no wheel" in note]
    assert said == [
        f"no wheel of evilpkg==1.0 fits this platform, so its sdist {SDIST} was taken from the "
        "package index (it is never built)"
    ]
    assert (evil.cache / "downloads" / "evilpkg" / "1.0" / SDIST).is_file()

    def no_pip(*args: object) -> tuple[int, str]:
        raise AssertionError("a pinned sdist in the cache is reused without pip")

    monkeypatch.setattr(index_module, "_run_pip", no_pip)
    [again], _ = resolve_sources(["evilpkg==1.0"], cache_dir=str(evil.cache))
    assert "csrc/gate.cu" in {f.path for f in again.files}
    [offline], _ = resolve_sources(["evilpkg==1.0"], cache_dir=str(evil.cache), offline=True)
    assert offline.version == "1.0"
    assert not evil.marker.exists()


# --- what pip is asked ------------------------------------------------------------------------


def _keyword_choices(function: object) -> Iterator[dict[str, object]]:
    """Every combination of the boolean (or defaulted) keyword arguments ``function`` takes."""
    parameters = [
        p
        for p in inspect.signature(function).parameters.values()  # type: ignore[arg-type]
        if p.kind is inspect.Parameter.KEYWORD_ONLY or p.default is not inspect.Parameter.empty
    ]
    for values in itertools.product((False, True), repeat=len(parameters)):
        yield {p.name: v for p, v in zip(parameters, values, strict=True)}


@pytest.mark.parametrize("spec", ["evilpkg==1.0", "evilpkg", "evilpkg>=1,<2", "Evil_Pkg[extra]==1.0"])
def test_every_pip_command_is_wheels_only(tmp_path: Path, spec: str) -> None:
    request = FetchRequest.parse(spec, Requirement(spec))
    for keywords in _keyword_choices(index_module._pip_command):
        command = index_module._pip_command(request, str(tmp_path), **keywords)  # type: ignore[arg-type]
        assert command[3] == "download"
        assert "--only-binary=:all:" in command, keywords
        assert not any(arg.startswith("--no-binary") for arg in command)
        assert command[-1] == request.pip_spec and not command[-1].startswith("-")


def test_a_url_requirement_is_never_handed_to_pip(tmp_path: Path) -> None:
    spec = "evilpkg @ https://example.invalid/evilpkg-1.0.tar.gz"
    with pytest.raises(ValueError, match="never through pip"):
        index_module._pip_command(FetchRequest.parse(spec, Requirement(spec)), str(tmp_path))


# --- name @ url -------------------------------------------------------------------------------


class Server:
    """Serves files on 127.0.0.1 (only), recording each request's path and User-Agent."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files
        self.unannounced: set[str] = set()  # served without a Content-Length
        self.requests: list[tuple[str, str]] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/{name}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        served = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                served.requests.append((self.path, self.headers.get("User-Agent", "")))
                body = served.files.get(self.path.lstrip("/"))
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                if self.path.lstrip("/") not in served.unannounced:
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        return Handler


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Evil, Server]]:
    evil = evil_index(tmp_path, monkeypatch)
    server = Server({SDIST: evil.sdist.read_bytes()})
    yield evil, server
    server.close()


def _no_pip(*args: object) -> tuple[int, str]:
    raise AssertionError("a name @ url spec must not run pip")


def test_http_url_is_downloaded_by_liftgate_into_the_cache(
    served: tuple[Evil, Server], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    evil, server = served
    monkeypatch.setattr(index_module, "_run_pip", _no_pip)
    spec = f"evilpkg @ {server.url(SDIST)}#sha256={evil.sha256}"
    code, report = evil.scan(spec)
    evil.assert_scanned_without_running(code, report, capsys.readouterr().err)
    [(path, agent)] = server.requests
    assert path == f"/{SDIST}"
    assert agent.startswith("liftgate/"), "downloaded by liftgate's own client, not by pip"
    [saved] = (evil.cache / "downloads" / "evilpkg").rglob("*.tar.gz")
    assert saved.name == SDIST and saved.read_bytes() == evil.sdist.read_bytes()
    assert [p.name for p in saved.parent.iterdir()] == [SDIST], "no temporary file is left"

    # With its hash in the URL, the cached file is reused; offline it is used as it is.
    code, report = evil.scan(spec)
    evil.assert_scanned_without_running(code, report, capsys.readouterr().err)
    code, report = evil.scan(f"evilpkg @ {server.url(SDIST)}", "--offline")
    evil.assert_scanned_without_running(code, report, capsys.readouterr().err)
    assert len(server.requests) == 1


def test_http_url_errors_are_one_line_and_leave_nothing(
    served: tuple[Evil, Server], monkeypatch: pytest.MonkeyPatch
) -> None:
    evil, server = served
    monkeypatch.setattr(index_module, "_run_pip", _no_pip)
    cache = str(evil.cache)
    url = server.url(SDIST)

    with pytest.raises(SourceError) as caught:
        resolve_sources([f"evilpkg @ {url}#sha256={'0' * 64}"], cache_dir=cache)
    assert str(caught.value).startswith(
        f"{SDIST} (from evilpkg @ {url}#sha256={'0' * 64}) does not match the sha256 in its URL (0000000000000000…, got "
    )

    # Too big: said by its Content-Length, or found while streaming one that has none.
    monkeypatch.setattr(index_module, "DOWNLOAD_LIMIT_BYTES", 100)
    too_big: list[str] = []
    for unannounced in (False, True):
        if unannounced:
            server.unannounced.add(SDIST)
        with pytest.raises(SourceError) as caught_big:
            resolve_sources([f"evilpkg @ {url}"], cache_dir=cache)
        too_big.append(str(caught_big.value))
    assert (
        too_big
        == [
            f"{SDIST} (from evilpkg @ {url}) is larger than the 100 bytes liftgate downloads at most, "
            "so it was not kept; download it yourself and pass the file"
        ]
        * 2
    )
    monkeypatch.setattr(index_module, "DOWNLOAD_LIMIT_BYTES", 8_000_000_000)

    nothing = server.url("nothing-1.0.tar.gz")
    with pytest.raises(SourceError) as missing:
        resolve_sources([f"evilpkg @ {nothing}"], cache_dir=cache)
    assert str(missing.value) == (
        f"cannot download nothing-1.0.tar.gz for evilpkg @ {nothing} from {nothing} (HTTP 404 Not Found); "
        "check the network and the URL, or download it yourself and pass the file"
    )

    with pytest.raises(SourceError) as offline:
        resolve_sources([f"evilpkg @ {server.url('other-1.0.tar.gz')}"], cache_dir=cache, offline=True)
    assert str(offline.value) == (
        f"evilpkg @ {server.url('other-1.0.tar.gz')} is not in the cache at {cache} and liftgate is offline; "
        "run once without --offline or pass a local file/directory"
    )
    for error in (caught, missing, offline):
        assert "\n" not in str(error.value)
    assert not (evil.cache / "downloads" / "evilpkg").exists(), "no file, partial or empty directory is left"
    assert not evil.marker.exists()


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "git+https://example.invalid/evil/evilpkg.git@v1.0",
            "evilpkg @ git+https://example.invalid/evil/evilpkg.git@v1.0 names a version-control repository (git); liftgate never "
            "runs version control or a build to get sources, so clone it yourself and pass the directory",
        ),
        (
            "hg+https://example.invalid/evilpkg",
            "evilpkg @ hg+https://example.invalid/evilpkg names a version-control repository (hg); liftgate never "
            "runs version control or a build to get sources, so clone it yourself and pass the directory",
        ),
        (
            "ftp://example.invalid/evilpkg-1.0.tar.gz",
            "evilpkg @ ftp://example.invalid/evilpkg-1.0.tar.gz: liftgate downloads http, https and file "
            "URLs only, not ftp; download the archive yourself and pass the file",
        ),
        (
            "https://example.invalid/evilpkg/archive/main",
            "evilpkg @ https://example.invalid/evilpkg/archive/main does not name a wheel or sdist (main); "
            "download it yourself and pass the file or its unpacked directory",
        ),
        (
            "file://fileserver/share/evilpkg-1.0.tar.gz",
            "evilpkg @ file://fileserver/share/evilpkg-1.0.tar.gz names a file on another host (fileserver); "
            "copy it here and pass the path",
        ),
    ],
)
def test_urls_liftgate_will_not_fetch_are_one_clear_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str, expected: str
) -> None:
    monkeypatch.setattr(index_module, "_run_pip", _no_pip)
    with pytest.raises(SourceError) as caught:
        resolve_sources([f"evilpkg @ {url}"], cache_dir=str(tmp_path / "cache"))
    assert str(caught.value) == expected


def test_file_url_to_nothing_is_a_source_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index_module, "_run_pip", _no_pip)
    missing = tmp_path / "gone-1.0.tar.gz"
    with pytest.raises(SourceError) as caught:
        resolve_sources([f"evilpkg @ {missing.as_uri()}"], cache_dir=str(tmp_path / "cache"))
    assert str(caught.value) == (
        f"no such file or directory: {missing} (named by evilpkg @ {missing.as_uri()}); check the URL"
    )
