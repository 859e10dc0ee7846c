"""Fetch ``name==version`` from the package index into the cache, with pip, without installing it.

pip runs as a subprocess (``sys.executable -m pip download --no-deps``) so liftgate honours the
user's index configuration (``pip.conf``, ``PIP_INDEX_URL``, proxies, certificates) without
reimplementing it. Wheels are preferred; an sdist is fetched only when no wheel fits. A pinned
version already in ``<cache>/downloads/<name>/<version>/`` is reused without running pip; an
unpinned name always asks pip (the newest release may have changed) and reuses what pip reports.
pip's failures are turned into one-line `SourceError`s: unknown version (with the versions the
index has), unreachable index, sdist that cannot be prepared, timeout.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from liftgate.sources.archive import archive_kind, filename_name_version
from liftgate.sources.interface import NullObserver, Observer, SourceError

PIP_TIMEOUT_S = 600
_SHOWN_VERSIONS = 5

_SAVED = re.compile(r"^\s*(?:Saved|File was already downloaded)\s+(.+?)\s*$", re.MULTILINE)
_FROM_VERSIONS = re.compile(r"\(from versions: ([^)]*)\)")
_NOT_FOUND = ("No matching distribution found", "Could not find a version that satisfies")
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
    "Max retries exceeded",
    "SSLError",
    "connection error:",
)
_BUILD_TROUBLE = ("metadata-generation-failed", "subprocess-exited-with-error", "Preparing metadata")


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


def cached_archive(request: FetchRequest, cache_root: str) -> str | None:
    """The best archive already downloaded for ``request``: a wheel before an sdist, newest first."""
    base = os.path.join(cache_root, "downloads", request.name)
    try:
        labels = os.listdir(base)
    except OSError:
        return None
    candidates: list[tuple[bool, Version, str]] = []
    for label in labels:
        directory = os.path.join(base, label)
        try:
            names = os.listdir(directory)
        except OSError:
            continue
        for filename in names:
            version = request.matches(filename)
            path = os.path.join(directory, filename)
            if version is not None and os.path.isfile(path):
                candidates.append((archive_kind(filename) == "wheel", version, path))
    if not candidates:
        return None
    return max(candidates)[2]


def _pip_command(
    request: FetchRequest, dest: str, *, wheels_only: bool, isolated_build: bool = False
) -> list[str]:
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        *([] if isolated_build else ["--no-build-isolation"]),
        "--no-input",
        "--disable-pip-version-check",
        "--progress-bar",
        "off",
        "-d",
        dest,
    ]
    if wheels_only:
        command.append("--only-binary=:all:")
    command.append(request.pip_spec)
    return command


def _run_pip(command: Sequence[str], cwd: str, spec: str) -> tuple[int, str]:
    try:
        completed = subprocess.run(
            list(command),
            cwd=cwd,
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


_GENERIC_BUILD_ERRORS = ("subprocess-exited-with-error", "metadata-generation-failed")


def _last_error_line(output: str) -> str:
    """The most telling error line of pip's output: the build's own ``error:`` before pip's summary."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    build_errors = [
        line for line in lines if line.startswith("error:") and not line.endswith(_GENERIC_BUILD_ERRORS)
    ]
    if build_errors:
        return build_errors[-1].removeprefix("error:").strip()
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
        return f"cannot reach the package index to fetch {spec}; check the network or pass a local wheel/directory"
    if any(marker in output for marker in _NOT_FOUND):
        listed = _FROM_VERSIONS.findall(output)
        versions = listed[-1].strip() if listed else ""
        if versions and versions != "none":
            return f"{spec} is not on the package index; available: {_format_versions(versions)}"
        return (
            f"no such file, directory or package: {spec} (the package index has no release of "
            f"{request.requirement.name}); check the spelling, the network, or pass a path"
        )
    if any(marker in output for marker in _BUILD_TROUBLE):
        return (
            f"{spec} has no wheel for this platform and pip could not prepare its sdist "
            f"({_last_error_line(output)}); download the archive by hand and pass the file"
        )
    return f"pip could not fetch {spec}: {_last_error_line(output)}; check the requirement or pass a local wheel/directory"


def _reported_archive(output: str, cwd: str, request: FetchRequest) -> str | None:
    for reported in reversed(_SAVED.findall(output)):
        path = os.path.normpath(os.path.join(cwd, reported))
        if os.path.isfile(path) and (request.requirement.url or request.matches(os.path.basename(path))):
            return path
    return None


def _remove_empty_dirs(directory: str, stop: str) -> None:
    """Remove ``directory`` and its parents up to ``stop`` while empty: failed fetches leave no litter."""
    while os.path.abspath(directory) != os.path.abspath(stop):
        try:
            os.rmdir(directory)
        except OSError:
            return
        directory = os.path.dirname(directory)


def fetch(
    request: FetchRequest,
    *,
    cache_root: str,
    observer: Observer | None = None,
    offline: bool = False,
    reuse: bool = True,
) -> tuple[str, bool]:
    """An archive of ``request`` in the cache, downloading it if needed: (path, whether it was reused).

    ``reuse=False`` skips the cache lookup for a pinned version (used after a corrupt download was removed).
    """
    observer = observer or NullObserver()
    if offline or (reuse and request.pinned is not None and not request.requirement.url):
        cached = cached_archive(request, cache_root)
        if cached is not None:
            observer.note(f"using {os.path.basename(cached)} from the cache")
            return cached, True
        if offline:
            raise SourceError(
                f"{request.spec} is not in the cache at {cache_root} and liftgate is offline; "
                "run once without --offline or pass a local wheel/directory"
            )

    dest = request.download_dir(cache_root)
    try:
        os.makedirs(dest, exist_ok=True)
    except OSError as exc:
        raise SourceError(
            f"cannot write to the cache at {dest}: {exc.strerror or exc}; pass another --cache-dir"
        ) from exc

    observer.start(f"Fetching {request.spec} from the package index")
    try:
        returncode, output = _run_pip(_pip_command(request, dest, wheels_only=True), dest, request.spec)
        if returncode != 0 and _has(output, _NOT_FOUND) and not _has(output, _NETWORK_TROUBLE):
            observer.note(f"no wheel of {request.spec} for this platform; looking for an sdist")
            returncode, output = _run_pip(_pip_command(request, dest, wheels_only=False), dest, request.spec)
            if returncode != 0 and _has(output, _BUILD_TROUBLE):
                # pip prepares an sdist's metadata before saving it; without build isolation that
                # fails whenever this environment lacks the sdist's build backend (setuptools'
                # bdist_wheel, scikit-build-core, ...), so let pip fetch the backend.
                observer.note(
                    f"preparing the sdist of {request.spec} needs its build backend; pip is fetching it"
                )
                returncode, output = _run_pip(
                    _pip_command(request, dest, wheels_only=False, isolated_build=True), dest, request.spec
                )
    finally:
        observer.finish()
    if returncode != 0:
        _remove_empty_dirs(dest, stop=os.path.join(cache_root, "downloads"))
        raise SourceError(explain_pip_failure(request, output))
    archive = _reported_archive(output, dest, request) or cached_archive(request, cache_root)
    if archive is None:
        raise SourceError(
            f"pip reported fetching {request.spec} but no archive of it is in {dest}; "
            "run again, or download it by hand and pass the file"
        )
    return archive, False
