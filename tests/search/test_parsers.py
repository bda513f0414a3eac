"""Golden tests of the document parsers (PDF, DOCX, PPTX, CSV/TSV), their attacks, and the same
documents indexed through the running service."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import pytest
from pypdf import PdfReader, PdfWriter

from actors.search.ingest import parsers
from actors.search.ingest.parsers import ParseError, UnsupportedFormat, parse
from tests.search import documents
from tests.search.conftest import SearchHarness

# -- PDF ------------------------------------------------------------------------------------------


def test_pdf_pages_become_paragraphs() -> None:
    data = documents.pdf(["Quarterly report\nRevenue grew (a lot).", "", "Second page: penguins."])
    assert parse(Path("r.pdf"), data) == (
        "Quarterly report\nRevenue grew (a lot).\n\nSecond page: penguins."
    )


def test_password_protected_pdf_is_refused() -> None:
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(documents.pdf(["secret plans"]))))
    writer.encrypt("hunter2", algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    with pytest.raises(ParseError, match="encrypted PDF"):
        parse(Path("locked.pdf"), out.getvalue())


@pytest.mark.parametrize("algorithm", ["RC4-128", "AES-256"])
def test_a_pdf_with_restrictions_but_no_password_to_open_is_read(algorithm: str) -> None:
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(documents.pdf(["open to all readers"]))))
    writer.encrypt(user_password="", owner_password="owner-only", algorithm=algorithm)
    out = io.BytesIO()
    writer.write(out)
    assert PdfReader(io.BytesIO(out.getvalue())).is_encrypted
    assert parse(Path("restricted.pdf"), out.getvalue()) == "open to all readers"


@pytest.mark.parametrize(
    "data", [b"", b"%PDF-1.4\n garbage", b"not a pdf at all", documents.pdf(["x"])[:200]]
)
def test_broken_pdf_is_a_parse_error(data: bytes) -> None:
    with pytest.raises(ParseError):
        parse(Path("broken.pdf"), data)


# -- DOCX -----------------------------------------------------------------------------------------

DOCX_BODY = (
    "<w:p><w:r><w:t>Meeting notes</w:t></w:r></w:p>"
    '<w:p><w:r><w:t xml:space="preserve">Budget </w:t></w:r>'
    "<w:r><w:rPr><w:b/></w:rPr><w:t>approved</w:t></w:r><w:r><w:tab/><w:t>2026</w:t></w:r></w:p>"
    "<w:p/>"
    "<w:p><w:r><w:t>line one</w:t><w:br/><w:t>line two</w:t></w:r></w:p>"
    "<w:tbl><w:tr>"
    "<w:tc><w:p><w:r><w:t>cell A</w:t></w:r></w:p></w:tc>"
    "<w:tc><w:p><w:r><w:t>cell B</w:t></w:r></w:p></w:tc>"
    "</w:tr></w:tbl>"
    "<w:p><w:r><w:t>日本語の段落</w:t></w:r></w:p>"
)


def test_docx_golden() -> None:
    assert parse(Path("notes.DOCX"), documents.docx(DOCX_BODY)) == (
        "Meeting notes\n\nBudget approved\t2026\n\nline one\nline two\n\ncell A\n\ncell B"
        "\n\n日本語の段落"
    )


BILLION_LAUGHS = (
    '<?xml version="1.0"?><!DOCTYPE w:document [<!ENTITY a "aaaaaaaaaa">'
    '<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]>'
    f'<w:document xmlns:w="{documents.W_NS}"><w:body><w:p><w:r><w:t>&b;</w:t></w:r></w:p>'
    "</w:body></w:document>"
)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (documents.zipped({"word/document.xml": BILLION_LAUGHS}), "declares a DOCTYPE"),
        (documents.zipped({"word/other.xml": "<x/>"}), "word/document.xml is missing"),
        (documents.zipped({"word/document.xml": "<w:document"}), "word/document.xml"),
        (b"PK\x03\x04 truncated", "not a valid Office file"),
        (b"plain text named .docx", "not a valid Office file"),
    ],
)
def test_docx_attacks_and_damage(data: bytes, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        parse(Path("evil.docx"), data)


EXTERNAL_ENTITY = (
    '<?xml version="1.0"?><!DOCTYPE w:document [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
    f'<w:document xmlns:w="{documents.W_NS}"><w:body><w:p><w:r><w:t>&x;</w:t></w:r></w:p>'
    "</w:body></w:document>"
)
# How a part may be encoded: a filter that searches the raw bytes for "<!DOCTYPE" sees none of
# it in UTF-16, while expat decodes the part and would expand its entities.
ENCODINGS = {
    "utf-8": ("UTF-8", b""),
    "utf-16le": ("UTF-16", b"\xff\xfe"),
    "utf-16be": ("UTF-16", b"\xfe\xff"),
    "utf-16le-no-bom": ("UTF-16", b""),
}


def encoded(xml: str, encoding: str) -> bytes:
    """`xml` in `encoding`, its declaration saying so (with a byte-order mark or without)."""
    declared, bom = ENCODINGS[encoding]
    xml = xml.replace('<?xml version="1.0"?>', f'<?xml version="1.0" encoding="{declared}"?>')
    return bom + xml.encode(encoding.removesuffix("-no-bom"))


# Each format's hostile part: where it sits, and the document built around it (in a deck, a
# second slide after a harmless first one).
DTD_CARRIERS: dict[str, tuple[str, Callable[[str, str], bytes]]] = {
    "docx": (
        "word/document.xml",
        lambda xml, enc: documents.zipped({"word/document.xml": encoded(xml, enc)}),
    ),
    "pptx": (
        "ppt/slides/slide2.xml",
        lambda xml, enc: documents.pptx(
            {1: documents.slide([["fine"]]), 2: encoded(xml.replace("w:document", "p:sld"), enc)}
        ),
    ),
}


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("xml", [BILLION_LAUGHS, EXTERNAL_ENTITY], ids=["laughs", "external"])
@pytest.mark.parametrize("kind", DTD_CARRIERS)
def test_a_dtd_is_refused_whatever_the_format_and_encoding(
    kind: str, xml: str, encoding: str
) -> None:
    part, build = DTD_CARRIERS[kind]
    with pytest.raises(ParseError) as caught:
        parse(Path(f"evil.{kind}"), build(xml, encoding))
    assert str(caught.value) == f"{part} declares a DOCTYPE (entity declarations are refused)"


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_docx_in_any_encoding_without_a_dtd_is_read(encoding: str) -> None:
    xml = (
        f'<?xml version="1.0"?><w:document xmlns:w="{documents.W_NS}"><w:body>'
        "<w:p><w:r><w:t>Grüße &amp; 日本語</w:t></w:r></w:p></w:body></w:document>"
    )
    data = documents.zipped({"word/document.xml": encoded(xml, encoding)})
    assert parse(Path("fine.docx"), data) == "Grüße & 日本語"


def test_docx_part_above_the_size_cap_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # The cap is read from the zip's declared size, before anything is decompressed.
    monkeypatch.setattr(parsers, "MAX_XML_BYTES", 1000)
    data = documents.docx("<w:p><w:r><w:t>" + "x" * 2000 + "</w:t></w:r></w:p>")
    with pytest.raises(ParseError, match="larger than 1000 bytes"):
        parse(Path("bomb.docx"), data)


# -- PPTX -----------------------------------------------------------------------------------------


def test_pptx_golden() -> None:
    data = documents.pptx(
        {
            10: documents.slide([["Tenth ", "slide"]]),
            1: documents.slide([["Title ", "one"], ["subtitle ", "text"], ["  "]]),
            2: documents.slide([["Second slide"]]),
            3: documents.slide([]),
        },
        extra={
            "ppt/slideLayouts/slideLayout1.xml": documents.slide([["layout placeholder"]]),
            "ppt/notesSlides/notesSlide1.xml": documents.slide([["speaker notes"]]),
        },
    )
    assert (
        parse(Path("deck.pptx"), data) == "Title one\nsubtitle text\n\nSecond slide\n\nTenth slide"
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (documents.zipped({"docProps/app.xml": "<x/>"}), "ppt/presentation.xml is missing"),
        (
            documents.pptx({1: BILLION_LAUGHS.replace("w:document", "p:sld")}),
            "declares a DOCTYPE",
        ),
        (b"\x00" * 64, "not a valid Office file"),
    ],
)
def test_pptx_attacks_and_damage(data: bytes, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        parse(Path("evil.pptx"), data)


# -- CSV / TSV ------------------------------------------------------------------------------------

CSV = (
    "name,city,notes\r\n"
    'Ada,London,"likes, commas"\r\n'
    "Bob,,quiet\r\n"
    ",,\r\n"
    "Cy,Paris,extra,overflow\r\n"
    'Di,"multi\nline",ok\r\n'
)
CSV_TEXT = (
    "name: Ada | city: London | notes: likes, commas\n\n"
    "name: Bob | notes: quiet\n\n"
    "name: Cy | city: Paris | notes: extra | overflow\n\n"
    "name: Di | city: multi\nline | notes: ok"
)


@pytest.mark.parametrize(
    ("name", "data", "text"),
    [
        ("people.csv", CSV.encode(), CSV_TEXT),
        (
            "people.tsv",
            CSV.replace(",", "\t").replace("likes\t commas", "likes, commas").encode(),
            CSV_TEXT,
        ),
        ("bom.csv", b"\xef\xbb\xbfname,city\r\nAda,London\r\n", "name: Ada | city: London"),
        ("latin1.csv", "name,city\nZoë,Bogotá\n".encode("latin-1"), "name: Zoë | city: Bogotá"),
        ("header-only.csv", b"name,city\n", "name | city"),
        ("empty.tsv", b"", ""),
        ("semicolons.csv", b"a;b\n1;2\n", "a: 1 | b: 2"),
        (
            "decimal-comma.csv",
            b'item;price;note\nTea;"3,50";"hot, sweet"\nCake;4,20;\n',
            "item: Tea | price: 3,50 | note: hot, sweet\n\nitem: Cake | price: 4,20",
        ),
        ("one-column.csv", b"name\nAda\nGrace\n", "name: Ada\n\nname: Grace"),
    ],
)
def test_delimited_golden(name: str, data: bytes, text: str) -> None:
    assert parse(Path(name), data) == text


def test_unsupported_types_are_named() -> None:
    with pytest.raises(UnsupportedFormat, match=r"unsupported file type '\.xlsx'"):
        parse(Path("sheet.xlsx"), b"PK")
    with pytest.raises(UnsupportedFormat, match=r"unsupported file type '\(none\)'"):
        parse(Path("README"), b"hello")


# -- through the service --------------------------------------------------------------------------


async def test_every_format_is_indexed_and_found(harness: SearchHarness) -> None:
    harness.registry.add("docs")
    files = {
        "report.pdf": documents.pdf(["Walrus migration report", "Appendix about narwhals"]),
        "minutes.docx": documents.docx(
            "<w:p><w:r><w:t>The capybara budget passed</w:t></w:r></w:p>"
        ),
        "deck.pptx": documents.pptx({1: documents.slide([["Ocelot roadmap"]])}),
        "animals.csv": b"animal,home\nplatypus,Australia\n",
        "animals.tsv": b"animal\thome\nquokka\tRottnest\n",
        "broken.docx": b"PK\x03\x04 not really",
    }
    for name, data in files.items():
        harness.write(f"docs/{name}", data)
    await harness.start(EMBEDDING_PROVIDER="none")
    for name in files:
        if name != "broken.docx":
            assert (await harness.event("search.document_indexed", name))["chunks"] >= 1
    dismissed = await harness.event("search.document_dismissed", "broken.docx")
    assert dismissed["reason"].startswith("not a valid Office file")

    expected = {
        "narwhals": "report.pdf",
        "capybara": "minutes.docx",
        "ocelot": "deck.pptx",
        "platypus": "animals.csv",
        "rottnest": "animals.tsv",
    }
    for word, source in expected.items():
        _, body = await harness.get("/api/search", db="docs", q=word, target="keyword")
        assert [g["source"] for g in body["keyword"]] == [source], word
    _, body = await harness.get("/api/search", db="docs", q="walrus narwhals", target="keyword")
    assert [m["content"] for m in body["keyword"][0]["matches"]] == [
        "Walrus migration report\n\nAppendix about narwhals"
    ]


async def test_office_files_with_a_dtd_are_dismissed_and_the_rest_indexed(
    harness: SearchHarness,
) -> None:
    harness.registry.add("docs")
    laughs_slide = BILLION_LAUGHS.replace("w:document", "p:sld")
    bad = {
        "laughs-utf16le.docx": documents.zipped(
            {"word/document.xml": encoded(BILLION_LAUGHS, "utf-16le")}
        ),
        "external-utf16be.docx": documents.zipped(
            {"word/document.xml": encoded(EXTERNAL_ENTITY, "utf-16be")}
        ),
        "laughs-utf16be.pptx": documents.pptx({1: encoded(laughs_slide, "utf-16be")}),
    }
    good = {
        "minutes.docx": documents.docx(
            "<w:p><w:r><w:t>The capybara budget passed</w:t></w:r></w:p>"
        ),
        "deck.pptx": documents.pptx({1: documents.slide([["Ocelot roadmap"]])}),
    }
    for name, data in {**bad, **good}.items():
        harness.write(f"docs/{name}", data)
    await harness.start(EMBEDDING_PROVIDER="none")
    for name in good:
        assert (await harness.event("search.document_indexed", name))["chunks"] >= 1
    for name in bad:
        dismissed = await harness.event("search.document_dismissed", name)
        assert dismissed["reason"].endswith(
            "declares a DOCTYPE (entity declarations are refused)"
        ), name
    for word, source in {"capybara": "minutes.docx", "ocelot": "deck.pptx"}.items():
        _, body = await harness.get("/api/search", db="docs", q=word, target="keyword")
        assert [g["source"] for g in body["keyword"]] == [source], word
    # A billion laughs expanded would have put its "a"s in the index.
    _, body = await harness.get("/api/search", db="docs", q="aaaaaaaaaa", target="keyword")
    assert body["keyword"] == []
