"""Golden tests of read-parameter parsing, normalisation and Accept negotiation."""

from __future__ import annotations

import pytest

from actors.images.params import (
    ReadParams,
    Variant,
    negotiate,
    output_size,
    parse_params,
    plan_variant,
)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({}, ReadParams()),
        ({"w": "300"}, ReadParams(width=300)),
        ({"width": "300"}, ReadParams(width=300)),
        ({"h": "200"}, ReadParams(height=200)),
        ({"height": "200"}, ReadParams(height=200)),
        ({"s": "64"}, ReadParams(size=64)),
        ({"size": "64"}, ReadParams(size=64)),
        ({"q": "55"}, ReadParams(quality=55)),
        ({"quality": "55"}, ReadParams(quality=55)),
        ({"t": "webp"}, ReadParams(fmt="webp")),
        ({"type": "AVIF"}, ReadParams(fmt="avif")),
        ({"t": "jpeg"}, ReadParams(fmt="jpg")),
        ({"t": "png"}, ReadParams(fmt="png")),
        ({"b": "2.5"}, ReadParams(blur=2.5)),
        ({"blur": "3"}, ReadParams(blur=3.0)),
        ({"B": "-20"}, ReadParams(bright=-20)),
        ({"bright": "40"}, ReadParams(bright=40)),
        ({"d": ""}, ReadParams(dark=True)),
        ({"dark": "1"}, ReadParams(dark=True)),
        ({"d": "0"}, ReadParams()),
        ({"o": ""}, ReadParams(origin=True)),
        ({"origin": "true"}, ReadParams(origin=True)),
        # the short name wins over its alias
        ({"w": "10", "width": "20"}, ReadParams(width=10)),
    ],
)
def test_parse_every_parameter_and_alias(query: dict[str, str], expected: ReadParams) -> None:
    assert parse_params(query) == expected


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"w": "abc"}, ReadParams()),
        ({"w": "0"}, ReadParams()),
        ({"w": "-5"}, ReadParams()),
        ({"w": "nan"}, ReadParams()),
        ({"w": "inf"}, ReadParams()),
        ({"w": "1e400"}, ReadParams()),
        ({"w": "99999999"}, ReadParams(width=8192)),
        ({"w": "12.6"}, ReadParams(width=13)),
        ({"w": "1" * 40}, ReadParams()),
        ({"q": "0"}, ReadParams()),
        ({"q": "1000"}, ReadParams(quality=100)),
        ({"t": "gif"}, ReadParams()),
        ({"t": "../../etc/passwd"}, ReadParams()),
        ({"t": "webp\x00"}, ReadParams()),
        ({"b": "-3"}, ReadParams()),
        ({"b": "1e9"}, ReadParams(blur=50.0)),
        ({"b": "nan"}, ReadParams()),
        ({"B": "-1000"}, ReadParams(bright=-100)),
        ({"B": "500"}, ReadParams(bright=100)),
        ({"d": "maybe"}, ReadParams()),
    ],
)
def test_hostile_values_are_dropped_or_clamped(query: dict[str, str], expected: ReadParams) -> None:
    assert parse_params(query) == expected


def test_transforms_flag() -> None:
    assert not ReadParams().transforms
    assert not ReadParams(dark=True).transforms
    assert ReadParams(width=3).transforms
    assert ReadParams(fmt="png").transforms
    assert ReadParams(bright=-1).transforms
    assert not ReadParams(origin=True, width=3).transforms


@pytest.mark.parametrize(
    ("params", "src", "out"),
    [
        (ReadParams(), (4000, 3000), (4000, 3000)),
        (ReadParams(width=800), (4000, 3000), (800, 600)),
        (ReadParams(height=300), (4000, 3000), (400, 300)),
        (ReadParams(size=800), (4000, 3000), (800, 600)),
        (ReadParams(size=800), (3000, 4000), (600, 800)),
        (ReadParams(width=800, height=100), (4000, 3000), (133, 100)),
        (ReadParams(size=800, width=400), (4000, 3000), (400, 300)),
        # never upscaled
        (ReadParams(width=9000), (4000, 3000), (4000, 3000)),
        (ReadParams(width=1), (4000, 30), (1, 1)),
    ],
)
def test_output_size_keeps_aspect_and_never_upscales(
    params: ReadParams, src: tuple[int, int], out: tuple[int, int]
) -> None:
    assert output_size(params, *src) == out


@pytest.mark.parametrize(
    ("accept", "source", "alpha", "avif_ok", "fmt"),
    [
        ("image/avif,image/webp,*/*", "jpg", False, True, "avif"),
        ("image/avif,image/webp,*/*", "jpg", False, False, "webp"),
        ("image/webp,*/*", "png", True, True, "webp"),
        ("image/avif;q=0,image/webp", "jpg", False, True, "webp"),
        ("*/*", "jpg", False, True, "jpg"),
        ("", "png", True, True, "png"),
        ("*/*", "gif", True, True, "png"),
        ("*/*", "webp", False, True, "jpg"),
        ("image/webp;q=abc", "jpg", False, True, "jpg"),
    ],
)
def test_negotiate(accept: str, source: str, alpha: bool, avif_ok: bool, fmt: str) -> None:
    assert negotiate(accept, source, alpha, avif_ok) == fmt


def test_equivalent_queries_share_one_variant_key() -> None:
    a = plan_variant(parse_params({"w": "99999", "q": "80"}), 640, 480, "webp")
    b = plan_variant(parse_params({"width": "640"}), 640, 480, "webp")
    c = plan_variant(parse_params({"s": "5000", "junk": "x", "d": "1"}), 640, 480, "webp")
    assert a == b == c
    assert a.key == "640x480-q80-b0-B0.webp"


def test_png_variant_has_no_quality() -> None:
    v = plan_variant(parse_params({"q": "30"}), 10, 10, "png")
    assert v == Variant(10, 10, "png", None, 0.0, 0)
    assert v.key == "10x10-q--b0-B0.png"
