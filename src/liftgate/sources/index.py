"""Fetch a requirement into the cache without installing, building or running any of it.

liftgate never lets anything build: preparing an sdist's metadata runs its ``setup.py`` or build
backend, so no path here gives pip a chance to do that. Wheels come from pip, run as a subprocess
(``sys.executable -m pip download --no-deps --only-binary=:all:``, every command `_pip_command`
builds) so liftgate honours the user's index configuration (``pip.conf``, ``PIP_INDEX_URL``, find-links,
proxies, certificates) without reimplementing it. A pinned version already in
``<cache>/downloads/<name>/<version>/`` is reused without running pip; an unpinned name always asks
pip (the newest release may have changed) and reuses what pip reports. pip's failures are turned
into one-line `SourceError`s: unknown version (with the versions the index has), no such project
(with close names from the cache, this environment and the stacks liftgate is for: the index is
never searched for names), unreachable index (naming the proxy it was reached through, from pip's
``proxy`` setting or ``HTTPS_PROXY``/``https_proxy``), timeout. ``--only-binary`` does not cover
requirements pip is handed as paths or URLs, so none is: pip's ``requirement``/``editable``
settings are dropped from its environment and refused in its configuration files.

Sdists never go through pip: `download_sdist` takes them straight from the index. It reads the
index settings pip would use (`IndexSettings.from_pip`), the project page of each index (PEP 691
JSON, else PEP 503 HTML; ``file://`` indexes too), picks the sdist of the wanted version, and streams
it into a temporary file checked against the hash the index lists (and a size bound) before it is
renamed into place. ``sdist=True`` (``--sdist``) takes that path and keeps its downloads in
``<version>/sdist/``, so a plain scan of the same version still gets the wheel; without it, the path
is taken when pip finds no wheel that fits, and the sdist is saved where the wheel would have been.

A ``name @ url`` requirement names one file, never handed to pip either: an ``http(s)://`` URL is
downloaded by the same client (checked against a ``#sha256=`` in the URL when there is one) into
``<cache>/downloads/<name>/@url/<key>/``, a ``file://`` URL is the local file or directory it points
at (`local_url_path`), and any other URL (``git+…`` and the other version-control schemes) is a
`SourceError`: cloning a repository, or building anything, is left to the user.
"""

from __future__ import annotations

import ast
import base64
import contextlib
import hashlib
import http.client
import json
import os
import posixpath
import re
import secrets
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import IO
from urllib.parse import parse_qsl, unquote, urldefrag, urljoin, urlsplit, urlunsplit

from packaging.requirements import Requirement
from packaging.utils import InvalidSdistFilename, canonicalize_name, parse_sdist_filename
from packaging.version import InvalidVersion, Version

from liftgate._version import __version__
from liftgate.sources.archive import archive_kind, filename_name_version
from liftgate.sources.interface import NullObserver, Observer, SourceError

PIP_TIMEOUT_S = 600
_SHOWN_VERSIONS = 5

_SAVED = re.compile(r"^\s*(?:Saved|File was already downloaded)\s+(.+?)\s*$", re.MULTILINE)
_FROM_VERSIONS = re.compile(r"\(from versions: ([^)]*)\)")
_NOT_FOUND = ("No matching distribution found", "Could not find a version that satisfies")
_PROXY_TROUBLE = (
    "ProxyError",
    "Cannot connect to proxy",
    "Unable to connect to proxy",
    "Tunnel connection failed",
)
# Projects a misspelling most likely meant, besides those in the cache and installed here: the
# stacks liftgate is for. Suggestions come from these only; the index is never searched for names.
_KNOWN_PROJECTS = (
    "torch", "triton", "vllm", "sglang", "sgl-kernel", "flashinfer-python", "flashinfer-cubin",
    "flash-attn", "xformers", "bitsandbytes", "deep-gemm", "nvidia-cutlass-dsl", "cupy-cuda12x",
    "nvidia-ml-py", "transformers", "accelerate", "tensorrt-llm", "lmdeploy",
)  # fmt: skip
_NETWORK_TROUBLE = (
    "NewConnectionError",
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Name or service not known",
    "nodename nor servname",
    "Network is unreachable",
    "No route to host",
    "Connection refused",
    "ConnectTimeoutError",
    "ReadTimeoutError",
    "ProxyError",
    "Cannot connect to proxy",
    "Unable to connect to proxy",
    "Tunnel connection failed",
    "Max retries exceeded",
    "SSLError",
    "connection error:",
)

DEFAULT_INDEX_URL = "https://pypi.org/simple/"
HTTP_TIMEOUT_S = 60.0  # per connect or read, as pip's --timeout; pip's own setting wins
PIP_CONFIG_TIMEOUT_S = 30
SDIST_DIR = "sdist"  # under <cache>/downloads/<name>/<version>/: what --sdist downloaded
# Under <cache>/downloads/<name>/: what "name @ https://..." downloaded, one directory per URL. No
# version label can contain "@", so these are never taken for a release of the index.
URL_DIR = "@url"
# The largest file liftgate downloads itself (sdists, name @ url files): the biggest wheels are a few GB.
DOWNLOAD_LIMIT_BYTES = 8_000_000_000
_VCS_SCHEMES = ("git", "hg", "svn", "bzr")
# pip options that add requirements of their own to a ``pip download``, which pip prepares (builds)
# even with --only-binary=:all:: liftgate drops them from pip's environment and refuses them in its
# configuration files (the sections pip download reads).
_ADDING_OPTIONS = ("requirement", "editable")
_ADDING_VARIABLES = frozenset(f"PIP_{option.upper()}" for option in _ADDING_OPTIONS)
_SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
_ACCEPT = f"{_SIMPLE_JSON}, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"
_USER_AGENT = f"liftgate/{__version__}"
# pip download reads these sections of its configuration, the first one setting an option winning;
# "install" comes last because a mirror configured only for installs is still the user's mirror.
_CONFIG_SECTIONS = (":env:", "download", "global", "install")
_TRUE_WORDS = ("1", "true", "yes", "on", "y")
_DOWNLOAD_CHUNK = 1 << 20
_MB = 1_000_000  # the unit of download progress
_SHOWN_FILES = 3


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """A requirement the user named, and where its download lives in the cache."""

    spec: str  # as the user wrote it
    name: str  # canonical name
    pip_spec: str  # what pip is asked for
    pinned: str | None  # the exact version for "name==version", else None
    requirement: Requirement

    @classmethod
    def parse(cls, spec: str, requirement: Requirement) -> FetchRequest:
        name = canonicalize_name(requirement.name)
        pinned: str | None = None
        specifiers = list(requirement.specifier)
        if len(specifiers) == 1 and specifiers[0].operator == "==" and "*" not in specifiers[0].version:
            pinned = specifiers[0].version
        if requirement.url:
            pip_spec = f"{requirement.name} @ {requirement.url}"
        else:
            pip_spec = f"{requirement.name}{requirement.specifier}"
        return cls(spec=spec, name=name, pip_spec=pip_spec, pinned=pinned, requirement=requirement)

    def download_dir(self, cache_root: str) -> str:
        if self.pinned is not None:
            try:
                label = str(Version(self.pinned))
            except InvalidVersion:
                label = re.sub(r"[^A-Za-z0-9._+-]", "_", self.pinned)
        else:
            label = "latest"
        return os.path.join(cache_root, "downloads", self.name, label)

    def matches(self, filename: str) -> Version | None:
        """The version of archive ``filename`` when it is a release of this requirement, else None."""
        if archive_kind(filename) is None:
            return None
        parts = filename_name_version(filename)
        if parts is None or canonicalize_name(parts[0]) != self.name:
            return None
        try:
            version = Version(parts[1])
        except InvalidVersion:
            return None
        if self.requirement.url or self.requirement.specifier.contains(version, prereleases=True):
            return version
        return None


def cached_archive(request: FetchRequest, cache_root: str, *, sdist: bool = False) -> str | None:
    """The best archive already downloaded for ``request``, newest first.

    By default a wheel before an sdist, from what pip saved. With ``sdist`` only sdists count,
    also those that ``--sdist`` saved under ``<version>/sdist/`` (which the default ignores, so
    a plain scan of a version fetched once with ``--sdist`` still gets its wheel).
    """
    base = os.path.join(cache_root, "downloads", request.name)
    try:
        labels = os.listdir(base)
    except OSError:
        return None
    candidates: list[tuple[bool, Version, str]] = []
    for label in labels:
        directories = [os.path.join(base, label)]
        if sdist:
            directories.append(os.path.join(base, label, SDIST_DIR))
        for directory in directories:
            try:
                names = os.listdir(directory)
            except OSError:
                continue
            for filename in names:
                version = request.matches(filename)
                path = os.path.join(directory, filename)
                if version is None or not os.path.isfile(path):
                    continue
                is_wheel = archive_kind(filename) == "wheel"
                if not (sdist and is_wheel):
                    candidates.append((is_wheel, version, path))
    if not candidates:
        return None
    return max(candidates)[2]


def _pip_command(request: FetchRequest, dest: str) -> list[str]:
    """The ``pip download`` of ``request``'s wheel. Always ``--only-binary=:all:``: pip would prepare an
    sdist's metadata, which runs its build, before saving it. Given on the command line, it also wins
    over a ``no-binary`` in pip's configuration. A ``name @ url`` requirement is never pip's to fetch."""
    if request.requirement.url:
        raise ValueError(f"{request.spec} names a URL, which liftgate fetches itself, never through pip")
    return [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--no-build-isolation",
        "--only-binary=:all:",
        "--no-input",
        "--disable-pip-version-check",
        "--progress-bar",
        "off",
        "-d",
        dest,
        request.pip_spec,
    ]


def _run_pip(command: Sequence[str], cwd: str, spec: str) -> tuple[int, str]:
    # pip adds the requirements these name to every download and prepares them, sdists and
    # directories included (--only-binary governs what it looks up, not what it is handed).
    environment = {k: v for k, v in os.environ.items() if k.upper() not in _ADDING_VARIABLES}
    try:
        completed = subprocess.run(
            list(command),
            cwd=cwd,
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=PIP_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise SourceError(
            f"pip did not finish fetching {spec} within {PIP_TIMEOUT_S} s; "
            "check the network or pass a local wheel/directory"
        ) from exc
    except OSError as exc:
        raise SourceError(
            f"cannot run pip to fetch {spec}: {exc.strerror or exc}; pass a local wheel/directory"
        ) from exc
    return completed.returncode, completed.stdout.decode("utf-8", "replace")


def _last_error_line(output: str) -> str:
    """The most telling line of pip's output: its last ``ERROR:`` line, else its last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR:")]
    if errors:
        return errors[-1].removeprefix("ERROR:").strip()
    return lines[-1] if lines else "no output"


def _has(output: str, markers: Sequence[str]) -> bool:
    return any(marker in output for marker in markers)


def _is_final(version: str) -> bool:
    try:
        parsed = Version(version)
    except InvalidVersion:
        return True
    return not (parsed.is_prerelease or parsed.is_devrelease)


def _format_versions(listed: str) -> str:
    """The newest few of pip's ascending version list, final releases first choice."""
    versions = [v.strip() for v in listed.split(",") if v.strip()]
    finals = [v for v in versions if _is_final(v)] or versions
    shown = finals[-_SHOWN_VERSIONS:]
    others = len(versions) - len(shown)
    return ", ".join(shown) + (f" (and {others} more)" if others else "")


def explain_pip_failure(request: FetchRequest, output: str) -> str:
    """One line saying why pip could not fetch ``request`` and what to do next."""
    spec = request.spec
    if "No module named pip" in output:
        return f"pip is not available to {sys.executable}, so {spec} cannot be fetched; install pip or pass a local wheel/directory"
    if any(marker in output for marker in _NETWORK_TROUBLE):
        proxy = proxy_in_use()
        if proxy is not None:
            address, source = proxy
            return (
                f"cannot reach the package index through the proxy {address} ({source}) to fetch {spec}; "
                "check the network and the proxy, or pass a local wheel/directory"
            )
        if _has(output, _PROXY_TROUBLE):
            return (
                f"cannot reach the package index through a proxy (pip reports a proxy error) to fetch {spec}; "
                "check the network and the proxy settings, or pass a local wheel/directory"
            )
        return f"cannot reach the package index to fetch {spec}; check the network or pass a local wheel/directory"
    if any(marker in output for marker in _NOT_FOUND):
        listed = _FROM_VERSIONS.findall(output)
        versions = listed[-1].strip() if listed else ""
        if versions and versions != "none":
            return f"{spec} is not on the package index; available: {_format_versions(versions)}"
        return no_project_message(request)
    return f"pip could not fetch {spec}: {_last_error_line(output)}; check the requirement or pass a local wheel/directory"


def proxy_in_use(index_url: str | None = None) -> tuple[str, str] | None:
    """The proxy pip talks to the index through, and where it is set: (address without credentials,
    "pip's proxy setting" or the variable's name); None when it uses none."""
    values = _pip_config_values()
    for section in _CONFIG_SECTIONS:
        value = values.get(f"{section}.proxy", "").strip()
        if value:
            return _redact(value), "PIP_PROXY" if section == ":env:" else "pip's proxy setting"
    if index_url is None:
        index_url = next(
            (
                values[f"{section}.index-url"]
                for section in _CONFIG_SECTIONS
                if values.get(f"{section}.index-url")
            ),
            DEFAULT_INDEX_URL,
        )
    parts = urlsplit(index_url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        return None
    if parts.hostname and urllib.request.proxy_bypass(parts.hostname):
        return None
    for variable in (f"{scheme.upper()}_PROXY", f"{scheme}_proxy", "ALL_PROXY", "all_proxy"):
        value = os.environ.get(variable, "").strip()
        if value:
            return _redact(value), variable
    return None


def _suggestions(name: str, cache_root: str | None) -> list[str]:
    """Project names close to ``name`` among those in the cache, those installed here and the stacks
    liftgate is for: never a lookup on the index."""
    import difflib
    import importlib.metadata

    candidates = set(_KNOWN_PROJECTS)
    if cache_root:
        with contextlib.suppress(OSError):
            candidates.update(os.listdir(os.path.join(cache_root, "downloads")))
    with contextlib.suppress(Exception):  # a broken distribution's metadata must not break a message
        candidates.update(str(d.metadata["Name"] or "") for d in importlib.metadata.distributions())
    canonical = {canonicalize_name(c) for c in candidates if c and not c.startswith(("@", "."))}
    canonical.discard(name)
    return difflib.get_close_matches(name, sorted(canonical), n=3, cutoff=0.75)


def no_project_message(
    request: FetchRequest, *, cache_root: str | None = None, listed_empty: bool = False
) -> str:
    """One line for a name the index has no project (``listed_empty``: no release files) of."""
    name = request.requirement.name
    suggested = _suggestions(canonicalize_name(name), cache_root)
    did_you_mean = f" (did you mean {' or '.join(suggested)}?)" if suggested else ""
    what = (
        f"the package index lists no release of {name}"
        if listed_empty
        else f"no project {name} on the package index"
    )
    return f"{what}{did_you_mean}; check the spelling, or pass a path (a wheel, an sdist or a directory)"


def _reported_archive(output: str, cwd: str, request: FetchRequest) -> str | None:
    for reported in reversed(_SAVED.findall(output)):
        path = os.path.normpath(os.path.join(cwd, reported))
        if os.path.isfile(path) and request.matches(os.path.basename(path)):
            return path
    return None


def _refuse_added_requirements(request: FetchRequest) -> None:
    """Raise `SourceError` when pip's configuration files add requirements to every download."""
    values = _pip_config_values()
    for section in ("global", "download"):
        for option in _ADDING_OPTIONS:
            value = values.get(f"{section}.{option}", "").strip()
            if value:
                raise SourceError(
                    f"pip's configuration adds {value} to every download ({option} in its [{section}] "
                    f"section), which pip would build, so liftgate does not run pip to fetch {request.spec}; "
                    "remove that setting, or pass a local wheel/directory"
                )


def _remove_empty_dirs(directory: str, stop: str) -> None:
    """Remove ``directory`` and its parents up to ``stop`` while empty: failed fetches leave no litter."""
    while os.path.abspath(directory) != os.path.abspath(stop):
        try:
            os.rmdir(directory)
        except OSError:
            return
        directory = os.path.dirname(directory)


# -- an sdist straight from the index, without pip ---------------------------------------


@dataclass(frozen=True, slots=True)
class IndexSettings:
    """Where pip is configured to look for releases, and how it talks to them."""

    index_url: str = DEFAULT_INDEX_URL
    extra_index_urls: tuple[str, ...] = ()
    cert: str | None = None  # a CA bundle file or directory; None: the system's
    timeout_s: float = HTTP_TIMEOUT_S
    proxy: str | None = None
    no_index: bool = False

    @property
    def urls(self) -> tuple[str, ...]:
        """The indexes to read, the main one first."""
        return () if self.no_index else (self.index_url, *self.extra_index_urls)

    @classmethod
    def from_pip(cls) -> IndexSettings:
        """The settings ``pip download`` would use: ``PIP_*`` variables, then pip's configuration files."""
        values = _pip_config_values()

        def option(*names: str) -> str | None:
            for section in _CONFIG_SECTIONS:
                for name in names:
                    value = values.get(f"{section}.{name}", "").strip()
                    if value:
                        return value
            return None

        timeout_s = HTTP_TIMEOUT_S
        configured_timeout = option("timeout", "default-timeout")
        if configured_timeout:
            with contextlib.suppress(ValueError):
                timeout_s = max(1.0, float(configured_timeout))
        return cls(
            index_url=option("index-url") or DEFAULT_INDEX_URL,
            extra_index_urls=tuple((option("extra-index-url") or "").split()),
            cert=option("cert") or os.environ.get("SSL_CERT_FILE") or None,
            timeout_s=timeout_s,
            proxy=option("proxy"),
            no_index=(option("no-index") or "").lower() in _TRUE_WORDS,
        )


def _pip_config_values() -> dict[str, str]:
    """pip's configuration as ``section.key`` → value: the files through ``pip config list`` (one
    subprocess, so every file pip reads is honoured), the ``PIP_*`` variables read directly (they
    win, and still work when pip cannot run)."""
    values: dict[str, str] = {}
    try:
        completed = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=PIP_CONFIG_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        completed = None
    if completed is not None and completed.returncode == 0:
        for line in completed.stdout.decode("utf-8", "replace").splitlines():
            key, sep, raw = line.partition("=")
            if sep:
                values[key.strip()] = _config_value(raw)
    for variable, value in os.environ.items():
        if variable.startswith("PIP_"):
            values[":env:." + variable[4:].lower().replace("_", "-")] = value
    return values


def _config_value(raw: str) -> str:
    """A value as ``pip config list`` prints it (``repr`` of a string)."""
    raw = raw.strip()
    try:
        return str(ast.literal_eval(raw))
    except (ValueError, SyntaxError):
        return raw.strip("'\"")


@dataclass(frozen=True, slots=True)
class IndexFile:
    """One file an index lists for a project."""

    filename: str
    url: str  # absolute, without the fragment
    digest: tuple[str, str] | None  # (hashlib algorithm, lowercase hex) that the index lists
    yanked: bool


class _IndexTrouble(Exception):
    """Internal: an index or a file could not be read; the message is the reason, for a `SourceError`."""


def _redact(url: str) -> str:
    """``url`` without the credentials it may carry, for messages."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def _network_reason(exc: BaseException) -> str:
    reason: object = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(reason, TimeoutError):
        return "timed out"
    if isinstance(reason, OSError) and reason.strerror:
        return str(reason.strerror)
    return str(reason) or type(reason).__name__


def _pick_digest(hashes: Mapping[str, str]) -> tuple[str, str] | None:
    """The hash to check a download against: sha256 when listed, else another one hashlib always has."""
    for algorithm in ("sha256", *sorted(hashes)):
        value = hashes.get(algorithm)
        if (
            isinstance(value, str)
            and algorithm in hashlib.algorithms_guaranteed
            and re.fullmatch(r"[0-9A-Fa-f]+", value)
        ):
            return algorithm, value.lower()
    return None


class _AnchorParser(HTMLParser):
    """The links of a PEP 503 project page (and its ``<base>``, if any)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.base: str | None = None
        self.anchors: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "base" and self.base is None and found.get("href"):
            self.base = found["href"]
        elif tag == "a" and found.get("href"):
            self.anchors.append(found)


def _parse_html_page(text: str, page_url: str) -> list[IndexFile]:
    parser = _AnchorParser()
    parser.feed(text)
    parser.close()
    base = urljoin(page_url, parser.base) if parser.base else page_url
    files: list[IndexFile] = []
    for anchor in parser.anchors:
        url, fragment = urldefrag(urljoin(base, anchor["href"] or ""))
        algorithm, sep, value = fragment.partition("=")
        files.append(
            IndexFile(
                filename=unquote(posixpath.basename(urlsplit(url).path)),
                url=url,
                digest=_pick_digest({algorithm: value}) if sep else None,
                yanked="data-yanked" in anchor,
            )
        )
    return files


def _parse_json_page(body: bytes, page_url: str) -> list[IndexFile]:
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise _IndexTrouble(f"its JSON project page is malformed: {exc}") from exc
    entries = data.get("files") if isinstance(data, dict) else None
    files: list[IndexFile] = []
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict):
            continue
        filename, url, hashes = entry.get("filename"), entry.get("url"), entry.get("hashes")
        if not isinstance(filename, str) or not isinstance(url, str):
            continue
        listed = {str(k): v for k, v in hashes.items()} if isinstance(hashes, dict) else {}
        files.append(
            IndexFile(
                filename=filename,
                url=urldefrag(urljoin(page_url, url))[0],
                digest=_pick_digest(listed),
                yanked=entry.get("yanked") not in (None, False),
            )
        )
    return files


class _IndexClient:
    """Reads project pages and files: http(s) through urllib with pip's certificates, proxy and
    timeout, ``file://`` from disk. Credentials in an index URL are sent, as basic auth, to that
    host only and never along a redirect."""

    def __init__(self, settings: IndexSettings) -> None:
        self.settings = settings
        self._opener: urllib.request.OpenerDirector | None = None
        self._credentials: dict[str, str] = {}  # host[:port] -> Authorization header value

    def project_files(self, index_url: str, name: str) -> list[IndexFile] | None:
        """What ``index_url`` lists for project ``name``; None when it has no such project."""
        page_url = f"{index_url.rstrip('/')}/{name}/"
        if urlsplit(page_url).scheme.lower() in ("file", ""):  # a file:// URL or a plain path
            path = os.path.join(urllib.request.url2pathname(urlsplit(page_url).path), "index.html")
            try:
                with open(path, "rb") as stream:
                    body = stream.read()
            except (FileNotFoundError, NotADirectoryError):
                return None  # no such project there, or no such local index at all
            except OSError as exc:
                raise _IndexTrouble(exc.strerror or str(exc)) from exc
            return _parse_html_page(body.decode("utf-8", "replace"), page_url)
        request = self._request(page_url)
        request.add_header("Accept", _ACCEPT)
        try:
            with self._open(request) as response:
                content_type = response.headers.get_content_type()
                charset = response.headers.get_content_charset() or "utf-8"
                body = response.read()
                final_url = response.geturl()
        except urllib.error.HTTPError as exc:
            exc.close()
            if exc.code in (404, 410):
                return None
            raise _IndexTrouble(f"HTTP {exc.code} {exc.reason}") from exc
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise _IndexTrouble(_network_reason(exc)) from exc
        if content_type == _SIMPLE_JSON:
            return _parse_json_page(body, final_url)
        return _parse_html_page(body.decode(charset, "replace"), final_url)

    def open_file(self, url: str) -> tuple[IO[bytes], int | None]:
        """A stream of the file at ``url`` and its size when known."""
        if urlsplit(url).scheme.lower() in ("file", ""):
            try:
                stream = open(urllib.request.url2pathname(urlsplit(url).path), "rb")  # noqa: SIM115 (the caller closes it)
                return stream, os.fstat(stream.fileno()).st_size
            except OSError as exc:
                raise _IndexTrouble(exc.strerror or str(exc)) from exc
        try:
            response = self._open(self._request(url))
        except urllib.error.HTTPError as exc:
            exc.close()
            raise _IndexTrouble(f"HTTP {exc.code} {exc.reason}") from exc
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise _IndexTrouble(_network_reason(exc)) from exc
        length = response.headers.get("Content-Length", "")
        return response, int(length) if length.isdigit() else None

    def _request(self, url: str) -> urllib.request.Request:
        parts = urlsplit(url)
        if parts.scheme.lower() not in ("http", "https"):
            raise _IndexTrouble(f"liftgate reads http, https and file indexes, not {parts.scheme}")
        userinfo, at, host = parts.netloc.rpartition("@")
        if at:
            user, _, password = userinfo.partition(":")
            token = base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode()).decode("ascii")
            self._credentials[host.lower()] = f"Basic {token}"
            url = urlunsplit(parts._replace(netloc=host))
        request = urllib.request.Request(url, headers={"User-Agent": _USER_AGENT})
        authorization = self._credentials.get(host.lower())
        if authorization is not None:
            request.add_unredirected_header("Authorization", authorization)
        return request

    def _open(self, request: urllib.request.Request) -> http.client.HTTPResponse:
        if self._opener is None:
            handlers: list[urllib.request.BaseHandler] = [
                urllib.request.HTTPSHandler(context=self._ssl_context())
            ]
            if self.settings.proxy:
                proxy = self.settings.proxy
                handlers.append(urllib.request.ProxyHandler({"http": proxy, "https": proxy}))
            self._opener = urllib.request.build_opener(*handlers)
        response: http.client.HTTPResponse = self._opener.open(request, timeout=self.settings.timeout_s)
        return response

    def _ssl_context(self) -> ssl.SSLContext:
        cert = self.settings.cert
        try:
            if cert and os.path.isdir(cert):
                return ssl.create_default_context(capath=cert)
            return ssl.create_default_context(cafile=cert or None)
        except (OSError, ssl.SSLError) as exc:
            raise SourceError(
                f"cannot load the certificates in {cert} (pip's cert setting, PIP_CERT or SSL_CERT_FILE): "
                f"{exc.strerror or exc}; point the setting at a CA bundle or unset it"
            ) from exc


def _safe_filename(filename: str) -> bool:
    return bool(filename) and "/" not in filename and "\\" not in filename and not filename.startswith(".")


def _sdist_version(file: IndexFile, name: str) -> Version | None:
    """The version of ``file`` when it is an sdist (``.tar.gz`` or ``.zip``) of project ``name``."""
    if not _safe_filename(file.filename):
        return None
    try:
        parsed_name, version = parse_sdist_filename(file.filename)
    except InvalidSdistFilename:
        return None
    return version if canonicalize_name(parsed_name) == name else None


def _pick_sdist(request: FetchRequest, files: Sequence[IndexFile]) -> tuple[IndexFile, Version] | None:
    """The sdist to fetch: of the pinned version (even yanked, as PEP 592 allows for ``==``), or the
    newest unyanked version the specifier allows (a pre-release only when no final one is there)."""
    sdists = [(version, f) for f in files if (version := _sdist_version(f, request.name)) is not None]
    specifier = request.requirement.specifier
    if request.pinned is not None:
        wanted = [(v, f) for v, f in sdists if specifier.contains(v, prereleases=True)]
    else:
        live = [(v, f) for v, f in sdists if not f.yanked]
        allowed = set(specifier.filter({v for v, _ in live}))
        wanted = [(v, f) for v, f in live if v in allowed]
    if not wanted:
        return None
    newest = max(v for v, _ in wanted)
    candidates = [f for v, f in wanted if v == newest]
    # Unyanked, with a hash to check, a .tar.gz: in that order.
    best = min(candidates, key=lambda f: (f.yanked, f.digest is None, not f.filename.endswith(".tar.gz")))
    return best, newest


def _listed(names: Sequence[str]) -> str:
    shown = ", ".join(names[:_SHOWN_FILES])
    others = len(names) - _SHOWN_FILES
    return shown + (f" and {others} more" if others > 0 else "")


def _release_version(filename: str, name: str) -> Version | None:
    """The version of ``filename`` when it is a wheel or sdist of project ``name``."""
    parts = filename_name_version(filename) if archive_kind(filename) else None
    if parts is None or canonicalize_name(parts[0]) != name:
        return None
    try:
        return Version(parts[1])
    except InvalidVersion:
        return None


def _no_sdist_message(
    request: FetchRequest,
    files: Sequence[IndexFile],
    *,
    no_wheel: bool = False,
    cache_root: str | None = None,
) -> str:
    spec = request.spec
    if no_wheel:
        # pip found no wheel that fits, so "scan it without --sdist" would not help.
        fitting = sorted({f.filename for f in files if request.matches(f.filename) is not None})
        if fitting:
            return (
                f"{spec} has no wheel for this platform and no sdist on the package index, only "
                f"{_listed(fitting)}; pass a local wheel, sdist or source tree"
            )
        released = sorted({v for f in files if (v := _release_version(f.filename, request.name)) is not None})
        if released:
            return (
                f"{spec} is not on the package index; available: "
                f"{_format_versions(', '.join(str(v) for v in released))}"
            )
    elif request.pinned is not None:
        same_version = sorted({f.filename for f in files if request.matches(f.filename) is not None})
        if same_version:
            return (
                f"{spec} has no sdist on the package index, only {_listed(same_version)}; "
                "scan it without --sdist, or pass a source tree"
            )
    versions = sorted({v for f in files if (v := _sdist_version(f, request.name)) is not None})
    if versions:
        return (
            f"no sdist of {spec} is on the package index; versions with an sdist: "
            f"{_format_versions(', '.join(str(v) for v in versions))}"
        )
    if no_wheel or not any(_release_version(f.filename, request.name) is not None for f in files):
        # No release of any kind under this name: a misspelling far more often than a project emptied.
        return no_project_message(request, cache_root=cache_root, listed_empty=True)
    return (
        f"{request.requirement.name} has no sdist on the package index, only wheels; "
        "scan it without --sdist, or pass a source tree"
    )


def _find_sdist(
    request: FetchRequest,
    client: _IndexClient,
    observer: Observer,
    *,
    no_wheel: bool = False,
    cache_root: str | None = None,
) -> tuple[IndexFile, Version]:
    """The sdist of ``request`` on the configured indexes, read in order; a pinned version stops at
    the first index that has it, an unpinned one reads them all for the newest."""
    files: list[IndexFile] = []
    trouble: list[tuple[str, str]] = []  # (index URL, reason)
    known = False
    picked: tuple[IndexFile, Version] | None = None
    for index_url in client.settings.urls:
        try:
            listed = client.project_files(index_url, request.name)
        except _IndexTrouble as exc:
            trouble.append((index_url, str(exc)))
            continue
        if listed is None:
            continue
        known = True
        files.extend(listed)
        picked = _pick_sdist(request, files)
        if picked is not None and request.pinned is not None:
            break
    if picked is not None:
        for index_url, reason in trouble:
            observer.note(f"skipped the package index at {_redact(index_url)} ({reason})")
        return picked
    if trouble:
        index_url, reason = trouble[0]
        hint = "the certificates (PIP_CERT), " if "certificate" in reason.lower() else ""
        # Without a wheel pip saw nothing either, most likely for the same reason: the index is
        # out of reach, so the message is about the requirement, not about its sdist.
        what, local = (request.spec, "wheel") if no_wheel else (f"the sdist of {request.spec}", "sdist")
        proxy = proxy_in_use(index_url)
        through, check = "", "the network"
        if proxy is not None:
            through, check = f" through the proxy {proxy[0]} ({proxy[1]})", "the network and the proxy"
        raise SourceError(
            f"cannot reach the package index at {_redact(index_url)}{through} to fetch {what} "
            f"({reason}); check {check}, {hint}or pass a local {local}/directory"
        )
    if not known:
        raise SourceError(no_project_message(request, cache_root=cache_root))
    raise SourceError(_no_sdist_message(request, files, no_wheel=no_wheel, cache_root=cache_root))


def _file_digest(path: str, algorithm: str) -> str:
    digest = hashlib.new(algorithm)
    with open(path, "rb") as stream:
        while chunk := stream.read(_DOWNLOAD_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True, slots=True)
class _Wording:
    """How a download's errors name the file and what to do: an index's sdist, or a URL's file."""

    what: str  # "the sdist of SPEC", "from SPEC"
    listed: str  # where the expected hash comes from
    mismatch: str  # what to do when the file does not match that hash
    unreachable: str  # what to do when the file cannot be read
    instead: str  # the way out that needs no download

    @classmethod
    def of(cls, request: FetchRequest, *, from_url: bool) -> _Wording:
        if from_url:
            return cls(
                what=f"from {request.spec}",
                listed="in its URL",
                mismatch="check the hash in the URL, and if it is right the server or the proxy in between",
                unreachable="check the network and the URL, or download it yourself and pass the file",
                instead="download it yourself and pass the file",
            )
        return cls(
            what=f"the sdist of {request.spec}",
            listed="the package index lists",
            mismatch="run again, and if it persists check the index or the proxy in between",
            unreachable="check the network or pass a local sdist/directory",
            instead="pass a local sdist/directory",
        )


def _size_text(size: int) -> str:
    if size >= 1000 * _MB:
        return f"{size / (1000 * _MB):g} GB"
    if size >= _MB:
        return f"{size / _MB:g} MB"
    return f"{size} bytes"


def _download(
    client: _IndexClient,
    file: IndexFile,
    target: str,
    request: FetchRequest,
    observer: Observer,
    *,
    from_url: bool = False,
) -> None:
    """Stream ``file`` into a temporary file beside ``target``, check it, rename it into place.

    On any failure the temporary file is removed: nothing half-written, oversized or unverified is left.
    """
    wording = _Wording.of(request, from_url=from_url)
    dest = os.path.dirname(target)
    cache_error = f"cannot write to the cache at {dest}"
    partial = os.path.join(dest, f".{file.filename}.{os.getpid()}-{secrets.token_hex(4)}.part")
    try:
        # os.open rather than mkstemp: the file gets the umask's permissions, as pip's downloads do.
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    except OSError as exc:
        raise SourceError(f"{cache_error}: {exc.strerror or exc}; pass another --cache-dir") from exc
    try:
        try:
            received, size, digest = _stream_into(client, file, fd, request, observer, wording)
            if size is not None and received != size:
                raise SourceError(
                    f"the download of {file.filename} for {request.spec} broke off ({received} of {size} "
                    f"bytes); run again, or {wording.instead}"
                )
            if file.digest is not None and digest != file.digest[1]:
                algorithm, expected = file.digest
                raise SourceError(
                    f"{file.filename} ({wording.what}) does not match the {algorithm} {wording.listed} "
                    f"({expected[:16]}…, got {digest[:16]}…), so it was not kept; {wording.mismatch}"
                )
            if file.digest is None and not from_url:
                observer.note(f"the package index lists no hash for {file.filename}; it is kept unverified")
            os.replace(partial, target)
        except OSError as exc:  # reading the network is handled in _stream_into: this is the cache
            raise SourceError(
                f"{cache_error}: {exc.strerror or exc}; free some space or pass another --cache-dir"
            ) from exc
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(partial)
        raise


def _stream_into(
    client: _IndexClient,
    file: IndexFile,
    fd: int,
    request: FetchRequest,
    observer: Observer,
    wording: _Wording,
) -> tuple[int, int | None, str]:
    """Copy ``file`` into the open file ``fd`` (closing it), at most `DOWNLOAD_LIMIT_BYTES`: bytes
    received, size announced, hex digest."""
    limit = DOWNLOAD_LIMIT_BYTES
    too_big = SourceError(
        f"{file.filename} ({wording.what}) is larger than the {_size_text(limit)} liftgate downloads at "
        "most, so it was not kept; download it yourself and pass the file"
    )
    digest = hashlib.new(file.digest[0] if file.digest else "sha256")
    received = 0
    with os.fdopen(fd, "wb") as out:
        try:
            stream, size = client.open_file(file.url)
        except _IndexTrouble as exc:
            raise SourceError(
                f"cannot download {file.filename} for {request.spec} from {_redact(file.url)} ({exc}); "
                f"{wording.unreachable}"
            ) from exc
        with stream:
            if size is not None and size > limit:
                raise too_big
            observer.start(
                f"Downloading {file.filename}" + (" (MB)" if size else ""),
                total=-(-size // _MB) if size else None,
            )
            shown = 0  # MB
            try:
                while True:
                    try:
                        chunk = stream.read(_DOWNLOAD_CHUNK)
                    except (OSError, http.client.HTTPException, ValueError) as exc:
                        raise SourceError(
                            f"the download of {file.filename} for {request.spec} broke off "
                            f"({_network_reason(exc)}); run again, or {wording.instead}"
                        ) from exc
                    if not chunk:
                        break
                    received += len(chunk)
                    if received > limit:
                        raise too_big
                    digest.update(chunk)
                    out.write(chunk)
                    if received // _MB > shown:
                        observer.advance(received // _MB - shown)
                        shown = received // _MB
            finally:
                observer.finish()
    return received, size, digest.hexdigest()


def download_sdist(
    request: FetchRequest,
    *,
    cache_root: str,
    observer: Observer | None = None,
    settings: IndexSettings | None = None,
    dest: str | None = None,
    no_wheel: bool = False,
) -> str:
    """Download the sdist of ``request`` straight from the package index, without building it: its path.

    The index is the one pip is configured with (``settings``, default `IndexSettings.from_pip`),
    then its extra indexes. A pinned version takes its sdist (yanked or not); an unpinned name the
    newest final release that has one. The file goes into ``dest``, default
    ``<cache>/downloads/<name>/<version>/sdist/``; a file already there with the listed hash is
    reused. Raises `SourceError` (one line) when the index cannot be read, lists no such sdist
    (saying what it lists instead), or the download does not match the listed hash or is larger
    than `DOWNLOAD_LIMIT_BYTES`. ``no_wheel``: the caller wants the sdist because no wheel fits, so
    the errors do not suggest a scan without ``--sdist``.
    """
    observer = observer or NullObserver()
    settings = settings or IndexSettings.from_pip()
    if not settings.urls:
        raise SourceError(
            f"pip is configured not to use a package index (no-index), so the sdist of {request.spec} "
            "cannot be fetched; pass a local sdist/directory"
        )
    client = _IndexClient(settings)
    observer.start(f"Looking up the sdist of {request.spec} on the package index")
    try:
        file, version = _find_sdist(request, client, observer, no_wheel=no_wheel, cache_root=cache_root)
    finally:
        observer.finish()
    if file.yanked:
        observer.note(
            f"{file.filename} is yanked on the package index; fetching it because {request.spec} pins it"
        )
    downloads = os.path.join(cache_root, "downloads")
    if dest is None:
        dest = os.path.join(downloads, request.name, str(version), SDIST_DIR)
    target = os.path.join(dest, file.filename)
    if file.digest is not None and os.path.isfile(target):
        try:
            if _file_digest(target, file.digest[0]) == file.digest[1]:
                observer.note(f"using {file.filename} from the cache")
                return target
        except OSError:
            pass  # unreadable: download it again over it
    _make_download_dir(dest)
    try:
        _download(client, file, target, request, observer)
    except BaseException:
        _remove_empty_dirs(dest, stop=downloads)
        raise
    return target


def _make_download_dir(dest: str) -> None:
    try:
        os.makedirs(dest, exist_ok=True)
    except OSError as exc:
        raise SourceError(
            f"cannot write to the cache at {dest}: {exc.strerror or exc}; pass another --cache-dir"
        ) from exc


def local_url_path(request: FetchRequest) -> str | None:
    """The local path a ``name @ file://…`` requirement points at; None for an ``http(s)://`` URL,
    which `fetch` downloads. Raises `SourceError` for any other URL: liftgate runs no version control
    and no build to get sources."""
    url = request.requirement.url or ""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme in ("http", "https"):
        return None
    if scheme == "file":
        if parts.netloc.lower() not in ("", "localhost"):
            raise SourceError(
                f"{request.spec} names a file on another host ({parts.netloc}); copy it here and pass the path"
            )
        return os.path.abspath(urllib.request.url2pathname(parts.path))
    vcs = scheme.partition("+")[0]
    if vcs in _VCS_SCHEMES:
        raise SourceError(
            f"{request.spec} names a version-control repository ({vcs}); liftgate never runs version "
            "control or a build to get sources, so clone it yourself and pass the directory"
        )
    if len(scheme) <= 1:  # no scheme, or a Windows drive letter
        raise SourceError(
            f"{request.spec} names {url}, which is not a URL; pass the file or directory itself"
        )
    raise SourceError(
        f"{request.spec}: liftgate downloads http, https and file URLs only, not {scheme}; "
        "download the archive yourself and pass the file"
    )


def _url_digest(fragment: str) -> tuple[str, str] | None:
    """The hash a URL's fragment gives (``#sha256=…``, as pip reads it), if any."""
    return _pick_digest(dict(parse_qsl(fragment)))


def fetch_url(
    request: FetchRequest,
    *,
    cache_root: str,
    observer: Observer | None = None,
    offline: bool = False,
    reuse: bool = True,
) -> tuple[str, bool]:
    """The file a ``name @ url`` requirement names, never through pip: (path, whether it came from the cache).

    A ``file://`` URL is the local file (an archive; `local_url_path` for directories too). An
    ``http(s)://`` URL is streamed by liftgate's own client (pip's certificates, proxy and timeout),
    at most `DOWNLOAD_LIMIT_BYTES`, into ``<cache>/downloads/<name>/@url/<key>/`` and checked
    against a hash in the URL's fragment when there is one. The cached file is reused offline, or
    when the URL's hash vouches for it; otherwise it is downloaded again, since what a URL serves
    may change. Anything else is a `SourceError`.
    """
    observer = observer or NullObserver()
    local = local_url_path(request)
    if local is not None:
        if not os.path.isfile(local) or archive_kind(local) is None:
            raise SourceError(
                f"{request.spec} does not point at a wheel or sdist file ({local}); pass the path itself"
            )
        return local, False
    address, fragment = urldefrag(request.requirement.url or "")
    filename = unquote(posixpath.basename(urlsplit(address).path))
    if not _safe_filename(filename) or archive_kind(filename) is None:
        raise SourceError(
            f"{request.spec} does not name a wheel or sdist ({filename or address}); "
            "download it yourself and pass the file or its unpacked directory"
        )
    file = IndexFile(filename=filename, url=address, digest=_url_digest(fragment), yanked=False)
    downloads = os.path.join(cache_root, "downloads")
    key = hashlib.sha256(_redact(address).encode()).hexdigest()[:16]
    dest = os.path.join(downloads, request.name, URL_DIR, key)
    target = os.path.join(dest, filename)
    if os.path.isfile(target) and (offline or (reuse and file.digest is not None)):
        try:
            vouched = file.digest is None or _file_digest(target, file.digest[0]) == file.digest[1]
        except OSError:
            vouched = False
        if vouched:
            observer.note(f"using {filename} from the cache")
            return target, True
    if offline:
        raise SourceError(
            f"{request.spec} is not in the cache at {cache_root} and liftgate is offline; "
            "run once without --offline or pass a local file/directory"
        )
    client = _IndexClient(IndexSettings.from_pip())
    _make_download_dir(dest)
    try:
        _download(client, file, target, request, observer, from_url=True)
    except BaseException:
        _remove_empty_dirs(dest, stop=downloads)
        raise
    return target, False


def fetch(
    request: FetchRequest,
    *,
    cache_root: str,
    observer: Observer | None = None,
    offline: bool = False,
    reuse: bool = True,
    sdist: bool = False,
) -> tuple[str, bool]:
    """An archive of ``request`` in the cache, downloading it if needed: (path, whether it was reused).

    Nothing is ever built. pip is asked for a wheel only (``--only-binary=:all:``); when none fits,
    the sdist is downloaded from the index without pip (`download_sdist`), saved where the wheel
    would have been, and one note says so. ``sdist=True`` wants the sdist, downloaded that way and
    reused from the cache only as an sdist. A ``name @ url`` requirement goes to `fetch_url`.
    ``reuse=False`` skips the cache lookup for a pinned version (used after a corrupt download was removed).
    """
    observer = observer or NullObserver()
    if request.requirement.url:
        return fetch_url(request, cache_root=cache_root, observer=observer, offline=offline, reuse=reuse)
    if offline or (reuse and request.pinned is not None):
        cached = cached_archive(request, cache_root, sdist=sdist)
        if cached is not None:
            observer.note(f"using {os.path.basename(cached)} from the cache")
            return cached, True
        if offline:
            wanted, local = (f"the sdist of {request.spec}", "sdist") if sdist else (request.spec, "wheel")
            raise SourceError(
                f"{wanted} is not in the cache at {cache_root} and liftgate is offline; "
                f"run once without --offline or pass a local {local}/directory"
            )
    if sdist:
        return download_sdist(request, cache_root=cache_root, observer=observer), False

    _refuse_added_requirements(request)
    dest = request.download_dir(cache_root)
    downloads = os.path.join(cache_root, "downloads")
    _make_download_dir(dest)
    observer.start(f"Fetching {request.spec} from the package index")
    try:
        returncode, output = _run_pip(_pip_command(request, dest), dest, request.spec)
    finally:
        observer.finish()
    if returncode != 0 and _has(output, _NOT_FOUND) and not _has(output, _NETWORK_TROUBLE):
        try:
            return _sdist_for_want_of_a_wheel(request, cache_root, dest, output, observer), False
        except BaseException:
            _remove_empty_dirs(dest, stop=downloads)
            raise
    if returncode != 0:
        _remove_empty_dirs(dest, stop=downloads)
        raise SourceError(explain_pip_failure(request, output))
    archive = _reported_archive(output, dest, request) or cached_archive(request, cache_root)
    if archive is None:
        raise SourceError(
            f"pip reported fetching {request.spec} but no archive of it is in {dest}; "
            "run again, or download it by hand and pass the file"
        )
    return archive, False


def _sdist_for_want_of_a_wheel(
    request: FetchRequest, cache_root: str, dest: str, output: str, observer: Observer
) -> str:
    """pip found no wheel of ``request`` that fits: its sdist from the index, into ``dest``, unbuilt."""
    settings = IndexSettings.from_pip()
    if not settings.urls:
        # pip reads only find-links then, which liftgate's client does not: pip's view is all there is.
        if _FROM_VERSIONS.search(output) and "(from versions: none)" not in output:
            raise SourceError(explain_pip_failure(request, output))
        raise SourceError(
            f"no wheel of {request.spec} fits this platform, and pip is configured not to use a package "
            "index (no-index), so liftgate cannot fetch its sdist; pass a local sdist/directory"
        )
    archive = download_sdist(
        request, cache_root=cache_root, observer=observer, settings=settings, dest=dest, no_wheel=True
    )
    observer.note(
        f"no wheel of {request.spec} fits this platform, so its sdist {os.path.basename(archive)} was taken "
        "from the package index (it is never built)"
    )
    return archive
