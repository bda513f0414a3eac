"""The tests' image mirror is the service's own simulated one."""

from __future__ import annotations

from actors.vm.fakemirror import IMAGE_BYTES, Mirror, mirror_files, serve_mirror

__all__ = ["IMAGE_BYTES", "Mirror", "mirror_files", "serve_mirror"]
