"""Configuration of the image service, from the environment (and ``.env``)."""

from __future__ import annotations

import os
from collections.abc import Mapping

import attrs

from actors.config import env_float, env_int

DEFAULT_TIMEOUT = 30.0
DEFAULT_MAX_UPLOAD = 20 * 1024 * 1024
DEFAULT_MAX_PIXELS = 64_000_000
DEFAULT_HOT_CACHE = 64 * 1024 * 1024
DEFAULT_DISK_CACHE = 1024 * 1024 * 1024
DEFAULT_MAX_AGE = 3600


@attrs.frozen
class ImageSettings:
    timeout: float = DEFAULT_TIMEOUT
    max_upload: int = DEFAULT_MAX_UPLOAD
    max_pixels: int = DEFAULT_MAX_PIXELS
    workers: int = 2
    hot_cache: int = DEFAULT_HOT_CACHE
    disk_cache: int = DEFAULT_DISK_CACHE
    max_age: int = DEFAULT_MAX_AGE

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ImageSettings:
        return cls(
            timeout=env_float(env, "IMAGES_TIMEOUT", DEFAULT_TIMEOUT, min=0.001),
            max_upload=_int(env, "IMAGES_MAX_UPLOAD", DEFAULT_MAX_UPLOAD, 1),
            max_pixels=_int(env, "IMAGES_MAX_PIXELS", DEFAULT_MAX_PIXELS, 1),
            workers=_int(env, "IMAGES_WORKERS", os.cpu_count() or 1, 1, 64),
            hot_cache=_int(env, "IMAGES_HOT_CACHE", DEFAULT_HOT_CACHE, 0),
            disk_cache=_int(env, "IMAGES_DISK_CACHE", DEFAULT_DISK_CACHE, 0),
            max_age=_int(env, "IMAGES_MAX_AGE", DEFAULT_MAX_AGE, 0),
        )


def _int(env: Mapping[str, str], name: str, default: int, lo: int, hi: int | None = None) -> int:
    value = env_int(env, name, default, min=lo, max=hi)
    assert value is not None  # a default is always given
    return value
