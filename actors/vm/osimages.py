"""The OS matrix: which cloud image each os/version uses, its checksum file and default user.

Official sources are each distribution's cloud image site. `IMAGE_BASE_URL` replaces every
official host with one mirror laid out as `<base>/<os>/<version>/<file>` (checksum file beside
the image), so an air-gapped site or a test serves the same tree from one place.
"""

from __future__ import annotations

import re

import attrs


@attrs.frozen
class OsImage:
    os: str
    version: str
    user: str
    url: str  # official image URL
    sums_name: str  # checksum file published in the image's directory
    algorithm: str  # hashlib name of the sums

    @property
    def filename(self) -> str:
        return self.url.rsplit("/", 1)[1]

    def image_url(self, base_url: str | None) -> str:
        if base_url:
            return f"{base_url}/{self.os}/{self.version}/{self.filename}"
        return self.url

    def sums_url(self, base_url: str | None) -> str:
        return self.image_url(base_url).rsplit("/", 1)[0] + "/" + self.sums_name

    @property
    def cache_name(self) -> str:
        # Rocky's "latest" names repeat across versions only by number; prefix keeps them apart.
        # A name that already starts with its os and version (Debian's) is kept as it is, not
        # doubled ("debian-12-debian-12-generic-amd64.qcow2").
        prefix = f"{self.os}-{self.version}-"
        return self.filename if self.filename.startswith(prefix) else prefix + self.filename


def _debian(version: str, codename: str) -> OsImage:
    return OsImage(
        "debian",
        version,
        "debian",
        f"https://cloud.debian.org/images/cloud/{codename}/latest/"
        f"debian-{version}-generic-amd64.qcow2",
        "SHA512SUMS",
        "sha512",
    )


def _ubuntu(version: str) -> OsImage:
    return OsImage(
        "ubuntu",
        version,
        "ubuntu",
        f"https://cloud-images.ubuntu.com/releases/{version}/release/"
        f"ubuntu-{version}-server-cloudimg-amd64.img",
        "SHA256SUMS",
        "sha256",
    )


def _rocky(version: str) -> OsImage:
    return OsImage(
        "rockylinux",
        version,
        "rocky",
        f"https://dl.rockylinux.org/pub/rocky/{version}/images/x86_64/"
        f"Rocky-{version}-GenericCloud-Base.latest.x86_64.qcow2",
        "CHECKSUM",
        "sha256",
    )


MATRIX: dict[str, dict[str, OsImage]] = {
    "debian": {
        v: _debian(v, c) for v, c in (("11", "bullseye"), ("12", "bookworm"), ("13", "trixie"))
    },
    "ubuntu": {v: _ubuntu(v) for v in ("20.04", "22.04", "24.04")},
    "rockylinux": {v: _rocky(v) for v in ("8", "9", "10")},
}


def default_user(os_name: str) -> str:
    return next(iter(MATRIX[os_name].values())).user


def find_image(os_name: str, version: str) -> OsImage | None:
    return MATRIX.get(os_name, {}).get(version)


def script_name(os_name: str, version: str) -> str:
    return f"{os_name}_{version}.sh"


_GNU_LINE = re.compile(r"^([0-9a-fA-F]{32,128})\s+\*?(\S.*)$")
_BSD_LINE = re.compile(r"^(\w+)\s*\((.+)\)\s*=\s*([0-9a-fA-F]{32,128})$")


def checksum_for(sums_text: str, filename: str) -> str | None:
    """The hex digest of `filename` in a sums file, GNU (`<hex>  <file>`) or BSD
    (`SHA256 (<file>) = <hex>`, Rocky's form) style; None if the file is not listed."""
    for raw in sums_text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        gnu = _GNU_LINE.match(line)
        if gnu and gnu.group(2).strip().lstrip("./") == filename:
            return gnu.group(1).lower()
        bsd = _BSD_LINE.match(line)
        if bsd and bsd.group(2).strip() == filename:
            return bsd.group(3).lower()
    return None
