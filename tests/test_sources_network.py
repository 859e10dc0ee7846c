"""Network tests for the sources stage: a real release fetched from the package index.

The download lands in liftgate's shared cache (``LIFTGATE_CACHE_DIR`` or the user cache dir),
not in ``tmp_path``, so reruns reuse it. Deselect offline with ``-m "not network"``.
"""

from __future__ import annotations

import os

import pytest

from liftgate.sources import NullObserver, SourceError, resolve_sources
from liftgate.sources import index as index_module
from liftgate.sources.archive import sha256_file
from liftgate.sources.cache import cache_root

pytestmark = pytest.mark.network

ALLREDUCE = "flashinfer/data/include/flashinfer/comm/trtllm_allreduce.cuh"
VLLM_SDIST_SHA256 = "f4c33c2503d52bb411146afa9618a4f48bed68912f617e6803ac8d76e4c74112"  # 47 MB
SCALED_MM_ENTRY = "csrc/quantization/w8a8/cutlass/scaled_mm_entry.cu"


class NoteTaker(NullObserver):
    def __init__(self) -> None:
        self.notes: list[str] = []

    def note(self, message: str) -> None:
        self.notes.append(message)


def test_flashinfer_release_is_fetched_and_listed() -> None:
    [package], _ = resolve_sources(["flashinfer-python==0.6.2"])
    assert (package.name, package.version, package.origin) == (
        "flashinfer-python",
        "0.6.2",
        "flashinfer-python==0.6.2",
    )
    [allreduce] = [f for f in package.files if f.path == ALLREDUCE]
    assert (allreduce.package, allreduce.version) == ("flashinfer-python", "0.6.2")
    assert allreduce.size > 10_000
    with open(allreduce.fspath, "rb") as stream:
        assert b"__CUDA_ARCH__" in stream.read()


def test_unknown_version_names_the_package() -> None:
    with pytest.raises(SourceError) as caught:
        resolve_sources(["flashinfer-python==9.9"])
    message = str(caught.value)
    assert message.startswith("flashinfer-python==9.9 is not on the package index; available: ")
    assert "0.6.2" in message or "more)" in message


def test_vllm_sdist_is_downloaded_without_building_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's C++ sources are only in its sdist, and pip cannot save that sdist without importing torch."""
    [package], _ = resolve_sources(["vllm==0.33.0"], sdist=True)
    assert (package.name, package.version, package.origin) == ("vllm", "0.33.0", "vllm==0.33.0")
    assert SCALED_MM_ENTRY in {f.path for f in package.files}
    archive = os.path.join(cache_root(), "downloads", "vllm", "0.33.0", "sdist", "vllm-0.33.0.tar.gz")
    assert sha256_file(archive) == VLLM_SDIST_SHA256

    def no_download(*args: object, **kwargs: object) -> str:
        raise AssertionError("a second run must take the sdist from the cache")

    monkeypatch.setattr(index_module, "download_sdist", no_download)
    observer = NoteTaker()
    [again], _ = resolve_sources(["vllm==0.33.0"], sdist=True, observer=observer)
    assert "using vllm-0.33.0.tar.gz from the cache" in observer.notes
    assert SCALED_MM_ENTRY in {f.path for f in again.files}
