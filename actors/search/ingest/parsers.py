"""Turn an inbox file into plain text: text and Markdown, PDF, DOCX, PPTX, CSV and TSV.

Paragraphs (and PDF pages, slides, table rows) are separated by blank lines so the chunker keeps
them together. DOCX and PPTX are read with zipfile and ElementTree rather than python-docx and
python-pptx: only the text is needed, and that avoids lxml and Pillow at run time. Office files
are untrusted input: a DOCTYPE (entity tricks), whatever the part's encoding, or an XML part
larger than `MAX_XML_BYTES` (a zip bomb) is refused.
"""

import csv
import io
import re
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath
from xml.etree import ElementTree
from xml.parsers import expat

MAX_XML_BYTES = 64 * 1024 * 1024

_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"


class UnsupportedFormat(Exception):
    """The file's type is not indexed (it is skipped with a log line)."""


class ParseError(Exception):
    """The file claims a supported type but could not be read."""


def _decode(data: bytes) -> str:
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        # Latin-1 never fails, so a legacy-encoded text file is still indexed, if imperfectly.
        return data.decode("latin-1")


def parse_text(data: bytes) -> str:
    return _decode(data)


def parse_delimited(data: bytes, delimiter: str | None) -> str:
    """One paragraph per row, each cell labelled with its column header. ``None``: a `.csv`
    whose separator is found from its first lines (``,`` or ``;``, as spreadsheets in locales
    with a decimal comma write them)."""
    text = _decode(data)
    rows = list(csv.reader(io.StringIO(text), delimiter=delimiter or _csv_delimiter(text)))
    if not rows:
        return ""
    header, body = rows[0], rows[1:]
    if not body:
        return " | ".join(cell.strip() for cell in header)
    lines = []
    for row in body:
        cells = []
        for index, cell in enumerate(row):
            cell = cell.strip()
            if not cell:
                continue
            name = header[index].strip() if index < len(header) else ""
            cells.append(f"{name}: {cell}" if name else cell)
        if cells:
            lines.append(" | ".join(cells))
    return "\n\n".join(lines)


def _csv_delimiter(text: str) -> str:
    sample = text[:8192]
    if len(text) > len(sample) and "\n" in sample:
        sample = sample[: sample.rindex("\n")]  # whole lines only
    try:
        return csv.Sniffer().sniff(sample, delimiters=",;").delimiter
    except csv.Error:
        return ","


def parse_pdf(data: bytes) -> str:
    from pypdf import PasswordType, PdfReader
    from pypdf.errors import DependencyError, PdfReadError

    try:
        reader = PdfReader(io.BytesIO(data))
        # Restrictions only (an owner password, an empty user password) open in any viewer;
        # only a PDF that needs a password to be read is refused.
        if reader.is_encrypted and reader.decrypt("") is PasswordType.NOT_DECRYPTED:
            raise ParseError("encrypted PDF: a password is needed to open it")
        pages = [page.extract_text() or "" for page in reader.pages]
    except DependencyError as exc:
        raise ParseError(f"encrypted PDF: {exc}") from exc
    except (PdfReadError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ParseError(f"unreadable PDF: {exc}") from exc
    return "\n\n".join(page.strip() for page in pages if page.strip())


def _refuse_dtd(raw: bytes, name: str) -> None:
    """Raise if the part declares a document type, whatever its encoding.

    The part goes through expat with no handler but these, so the check costs one fast pass and
    is made on what expat decoded, not on a search of the raw bytes: a part in UTF-16 (or any
    encoding expat reads) is caught all the same, before an entity is declared or expanded. The
    tree is then built from the same bytes by the same parser, which can meet no DTD."""

    def refuse(*_: object) -> None:
        raise ParseError(f"{name} declares a DOCTYPE (entity declarations are refused)")

    parser = expat.ParserCreate()
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    parser.StartDoctypeDeclHandler = refuse
    parser.EntityDeclHandler = refuse
    parser.UnparsedEntityDeclHandler = refuse
    try:
        parser.Parse(raw, True)
    except expat.ExpatError as exc:
        raise ParseError(f"{name}: {exc}") from exc


def _read_xml(archive: zipfile.ZipFile, name: str) -> ElementTree.Element:
    info = archive.getinfo(name)
    if info.file_size > MAX_XML_BYTES:
        raise ParseError(f"{name} is larger than {MAX_XML_BYTES} bytes")
    raw = archive.read(info)
    _refuse_dtd(raw, name)
    try:
        return ElementTree.fromstring(raw)
    except ElementTree.ParseError as exc:
        raise ParseError(f"{name}: {exc}") from exc


def _open_zip(data: bytes) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as exc:
        raise ParseError(f"not a valid Office file: {exc}") from exc


def _docx_paragraph(paragraph: ElementTree.Element) -> str:
    parts: list[str] = []
    for node in paragraph.iter():
        if node.tag == f"{_W}t" and node.text:
            parts.append(node.text)
        elif node.tag == f"{_W}tab":
            parts.append("\t")
        elif node.tag in (f"{_W}br", f"{_W}cr"):
            parts.append("\n")
    return "".join(parts).strip()


def parse_docx(data: bytes) -> str:
    with _open_zip(data) as archive:
        try:
            root = _read_xml(archive, "word/document.xml")
        except KeyError as exc:
            raise ParseError("not a DOCX file: word/document.xml is missing") from exc
    paragraphs = (_docx_paragraph(p) for p in root.iter(f"{_W}p"))
    return "\n\n".join(p for p in paragraphs if p)


def _slide_number(name: str) -> int:
    match = re.search(r"(\d+)\.xml$", name)
    return int(match.group(1)) if match else 0


def parse_pptx(data: bytes) -> str:
    with _open_zip(data) as archive:
        slides = sorted(
            (n for n in archive.namelist() if re.fullmatch(r"ppt/slides/slide\d+\.xml", n)),
            key=_slide_number,
        )
        if not slides and "ppt/presentation.xml" not in archive.namelist():
            raise ParseError("not a PPTX file: ppt/presentation.xml is missing")
        texts = []
        for name in slides:
            root = _read_xml(archive, name)
            lines = ("".join(t.text or "" for t in p.iter(f"{_A}t")) for p in root.iter(f"{_A}p"))
            slide = "\n".join(line.strip() for line in lines if line.strip())
            if slide:
                texts.append(slide)
    return "\n\n".join(texts)


PARSERS: dict[str, Callable[[bytes], str]] = {
    ".txt": parse_text,
    ".text": parse_text,
    ".md": parse_text,
    ".markdown": parse_text,
    ".csv": lambda data: parse_delimited(data, None),
    ".tsv": lambda data: parse_delimited(data, "\t"),
    ".pdf": parse_pdf,
    ".docx": parse_docx,
    ".pptx": parse_pptx,
}


def is_supported(source: str) -> bool:
    return PurePosixPath(source).suffix.lower() in PARSERS


def is_ignored(relative: PurePosixPath) -> bool:
    """Hidden files and editors' lock and temporary files are never documents."""
    for part in relative.parts:
        if part.startswith((".", "~$")):
            return True
    return relative.name.endswith(("~", ".tmp", ".swp", ".part"))


def parse(path: Path, data: bytes) -> str:
    """The text of a document; raises UnsupportedFormat or ParseError."""
    parser = PARSERS.get(path.suffix.lower())
    if parser is None:
        raise UnsupportedFormat(f"unsupported file type {path.suffix or '(none)'!r}")
    try:
        return parser(data)
    except ParseError:
        raise
    except (csv.Error, zipfile.BadZipFile, zipfile.LargeZipFile, OSError) as exc:
        raise ParseError(str(exc)) from exc


def iter_inbox(root: Path) -> Iterator[tuple[PurePosixPath, Path]]:
    """Every candidate document under an inbox, as (relative source path, absolute path)."""
    if not root.is_dir():
        return
    for path in sorted(root.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        relative = PurePosixPath(path.relative_to(root).as_posix())
        if not is_ignored(relative):
            yield relative, path
