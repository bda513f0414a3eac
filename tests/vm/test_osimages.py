"""The OS matrix: nine images, their users, checksum files and the mirror layout."""

from __future__ import annotations

from actors.vm.osimages import MATRIX, checksum_for, default_user, find_image, script_name
from tests.vm.helpers import settings  # noqa: F401  (keeps the helpers importable)


def test_matrix_urls() -> None:
    urls = {(i.os, i.version): i.image_url(None) for v in MATRIX.values() for i in v.values()}
    assert urls == {
        ("debian", "11"): "https://cloud.debian.org/images/cloud/bullseye/latest/debian-11-generic-amd64.qcow2",
        ("debian", "12"): "https://cloud.debian.org/images/cloud/bookworm/latest/debian-12-generic-amd64.qcow2",
        ("debian", "13"): "https://cloud.debian.org/images/cloud/trixie/latest/debian-13-generic-amd64.qcow2",
        ("ubuntu", "20.04"): "https://cloud-images.ubuntu.com/releases/20.04/release/ubuntu-20.04-server-cloudimg-amd64.img",
        ("ubuntu", "22.04"): "https://cloud-images.ubuntu.com/releases/22.04/release/ubuntu-22.04-server-cloudimg-amd64.img",
        ("ubuntu", "24.04"): "https://cloud-images.ubuntu.com/releases/24.04/release/ubuntu-24.04-server-cloudimg-amd64.img",
        ("rockylinux", "8"): "https://dl.rockylinux.org/pub/rocky/8/images/x86_64/Rocky-8-GenericCloud-Base.latest.x86_64.qcow2",
        ("rockylinux", "9"): "https://dl.rockylinux.org/pub/rocky/9/images/x86_64/Rocky-9-GenericCloud-Base.latest.x86_64.qcow2",
        ("rockylinux", "10"): "https://dl.rockylinux.org/pub/rocky/10/images/x86_64/Rocky-10-GenericCloud-Base.latest.x86_64.qcow2",
    }  # fmt: skip


def test_sums_files_sit_beside_the_images() -> None:
    deb = find_image("debian", "12")
    assert deb is not None
    assert deb.sums_url(None) == "https://cloud.debian.org/images/cloud/bookworm/latest/SHA512SUMS"
    assert deb.algorithm == "sha512"
    ubu = find_image("ubuntu", "24.04")
    assert ubu is not None and ubu.sums_url(None).endswith("/24.04/release/SHA256SUMS")
    rocky = find_image("rockylinux", "9")
    assert rocky is not None and rocky.sums_url(None).endswith("/9/images/x86_64/CHECKSUM")


def test_mirror_layout() -> None:
    image = find_image("rockylinux", "10")
    assert image is not None
    base = "http://127.0.0.1:9000/mirror"
    assert image.image_url(base) == (
        f"{base}/rockylinux/10/Rocky-10-GenericCloud-Base.latest.x86_64.qcow2"
    )
    assert image.sums_url(base) == f"{base}/rockylinux/10/CHECKSUM"


def test_users_and_scripts() -> None:
    assert [default_user(o) for o in MATRIX] == ["debian", "ubuntu", "rocky"]
    assert script_name("ubuntu", "22.04") == "ubuntu_22.04.sh"
    assert find_image("debian", "10") is None and find_image("arch", "1") is None


def test_checksum_formats() -> None:
    gnu = "abc123" * 8 + "  debian-12-generic-amd64.qcow2\n" + "ff" * 32 + " *other.img\n"
    assert checksum_for(gnu, "debian-12-generic-amd64.qcow2") == "abc123" * 8
    assert checksum_for(gnu, "other.img") == "ff" * 32
    bsd = (
        "# Rocky-9-GenericCloud-Base.latest.x86_64.qcow2: 600 bytes\n"
        "SHA256 (Rocky-9-GenericCloud-Base.latest.x86_64.qcow2) = " + "AB" * 32 + "\n"
    )
    assert checksum_for(bsd, "Rocky-9-GenericCloud-Base.latest.x86_64.qcow2") == "ab" * 32
    assert checksum_for(bsd, "missing.qcow2") is None


def test_cache_names_are_unique_and_never_doubled() -> None:
    names = {(i.os, i.version): i.cache_name for v in MATRIX.values() for i in v.values()}
    assert names[("debian", "12")] == "debian-12-generic-amd64.qcow2"
    assert all(not n.startswith(f"{os}-{v}-{os}-{v}-") for (os, v), n in names.items())
    assert all(n.startswith(f"{os}-{v}-") for (os, v), n in names.items())
    assert len(set(names.values())) == len(names)
