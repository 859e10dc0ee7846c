"""Read a package's name and version from the files that declare them, without importing anything.

Core metadata (``METADATA``, ``PKG-INFO``) is read as headers up to the first blank line, so
this works for any interpreter's environment, not just the running one. Source trees also
declare themselves in ``pyproject.toml`` (``[project]``) and ``setup.cfg`` (``[metadata]``);
dynamic or computed values (``attr:``, ``file:``) count as unknown.
"""

from __future__ import annotations

import configparser
import os
import re
import sys
from collections.abc import Sequence

from liftgate.sources.interface import display_name, open_regular

# A declaration file larger than this is not one (the largest real pyproject.toml is ~50 KB).
MAX_DECLARATION_BYTES = 4 << 20


def read_metadata_headers(path: str) -> dict[str, str]:
    """The first value of each header of a core-metadata file (keys lower-cased); {} if unreadable.

    Stops at the blank line that ends the headers: the body (often the whole README) is never read.
    Only a regular file is opened (a FIFO named METADATA would block), and no more than
    `MAX_DECLARATION_BYTES` of it is read.
    """
    headers: dict[str, str] = {}
    try:
        with open_regular(path) as stream:
            for raw_line in iter(lambda: stream.readline(64 << 10), b""):
                if stream.tell() > MAX_DECLARATION_BYTES:
                    break
                line = raw_line.decode("utf-8", "replace").rstrip("\r\n")
                if not line.strip():
                    break
                if line[0] in " \t":
                    continue  # continuation line of a multi-line header
                key, sep, value = line.partition(":")
                if sep:
                    headers.setdefault(key.strip().lower(), display_name(value.strip()))
    except OSError:
        return headers
    return headers


_SECTION = re.compile(r"^\s*\[\s*([^\]]+?)\s*\]\s*(?:#.*)?$")
_STRING_KEY = re.compile(r"""^\s*(name|version)\s*=\s*(?:"([^"]*)"|'([^']*)')\s*(?:#.*)?$""")


def parse_pyproject_project(text: str) -> dict[str, str]:
    """``name`` and ``version`` of ``[project]`` when given as plain strings; a dependency-free TOML subset."""
    found: dict[str, str] = {}
    in_project = False
    for line in text.splitlines():
        section = _SECTION.match(line)
        if section:
            in_project = section.group(1) == "project"
            continue
        if in_project:
            key = _STRING_KEY.match(line)
            if key:
                found.setdefault(key.group(1), key.group(2) if key.group(2) is not None else key.group(3))
    return found


def _read_declaration(path: str) -> str | None:
    """The text of a small regular file, None when it is missing, not regular, unreadable or too big."""
    try:
        with open_regular(path) as stream:
            data = stream.read(MAX_DECLARATION_BYTES + 1)
    except OSError:
        return None
    return None if len(data) > MAX_DECLARATION_BYTES else data.decode("utf-8", "replace")


def _pyproject(root: str) -> dict[str, str]:
    text = _read_declaration(os.path.join(root, "pyproject.toml"))
    if text is None:
        return {}
    if sys.version_info >= (3, 11):
        import tomllib

        try:
            project = tomllib.loads(text).get("project")
        except tomllib.TOMLDecodeError:
            return {}
        if not isinstance(project, dict):
            return {}
        return {key: value for key in ("name", "version") if isinstance(value := project.get(key), str)}
    return parse_pyproject_project(text)


def _setup_cfg(root: str) -> dict[str, str]:
    text = _read_declaration(os.path.join(root, "setup.cfg"))
    if text is None:
        return {}
    parser = configparser.RawConfigParser()
    try:
        parser.read_string(text)
    except configparser.Error:
        return {}
    found: dict[str, str] = {}
    for key in ("name", "version"):
        value = parser.get("metadata", key, fallback="").strip()
        if value and not value.startswith(("attr:", "file:")):
            found[key] = value
    return found


def _pkg_info(root: str) -> dict[str, str]:
    return read_metadata_headers(os.path.join(root, "PKG-INFO"))


_READERS = {"pyproject": _pyproject, "pkg-info": _pkg_info, "setup.cfg": _setup_cfg}


def project_metadata(
    root: str, order: Sequence[str] = ("pyproject", "pkg-info", "setup.cfg")
) -> tuple[str | None, str | None]:
    """Name and version declared at the root of a source tree; each field from the first file that has it."""
    name: str | None = None
    version: str | None = None
    for reader in order:
        found = _READERS[reader](root)
        name = name or found.get("name") or None
        version = version or found.get("version") or None
        if name and version:
            break
    # Declared values go into reports and hashes: no control characters or lone surrogates.
    return (display_name(name) if name else None), (display_name(version) if version else None)
