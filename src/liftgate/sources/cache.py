"""Where liftgate keeps what it downloads and unpacks: one cache directory, chosen once.

The ``cache_dir`` argument wins, then the ``LIFTGATE_CACHE_DIR`` environment variable, then
the platform's user cache directory. Downloads live under ``downloads/<name>/<version>`` and
unpacked archives under ``unpacked/<sha256 of the archive>``.
"""

from __future__ import annotations

import os

CACHE_ENV_VAR = "LIFTGATE_CACHE_DIR"


def cache_root(cache_dir: str | None = None) -> str:
    """The absolute cache directory (not created here)."""
    if cache_dir:
        return os.path.abspath(os.path.expanduser(cache_dir))
    from_env = os.environ.get(CACHE_ENV_VAR)
    if from_env:
        return os.path.abspath(os.path.expanduser(from_env))
    import platformdirs

    return os.path.abspath(platformdirs.user_cache_dir("liftgate"))
