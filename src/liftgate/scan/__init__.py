"""The scan: sources → workspace → detectors → a `Report` (`liftgate.scan.run`)."""

from liftgate.scan.cache import CACHE_FORMAT, ScanCache
from liftgate.scan.run import resolve_targets, scan
from liftgate.scan.toolkit import local_cuda_version, parse_cuda_version

__all__ = ["CACHE_FORMAT", "ScanCache", "local_cuda_version", "parse_cuda_version", "resolve_targets", "scan"]
