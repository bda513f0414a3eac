"""Small real documents built in the tests: PDF (hand-written objects, read back by pypdf) and
DOCX/PPTX (the Office Open XML parts a reader needs, zipped)."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Mapping, Sequence

W_NS = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
A_NS = "http://schemas.openxmlformats.org/drawingml/2006/main"
P_NS = "http://schemas.openxmlformats.org/presentationml/2006/main"


def pdf(pages: Sequence[str]) -> bytes:
    """A PDF with one page per entry, each line of it drawn in Helvetica."""
    objects: list[bytes] = []

    def add(body: bytes) -> int:
        objects.append(body)
        return len(objects)

    font = add(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    contents = []
    for text in pages:
        ops = [b"BT /F1 12 Tf 72 720 Td 14 TL"]
        for line in text.split("\n"):
            escaped = line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
            ops.append(b"(" + escaped.encode("latin-1") + b") Tj T*")
        ops.append(b"ET")
        stream = b"\n".join(ops)
        contents.append(add(b"<< /Length %d >>\nstream\n%b\nendstream" % (len(stream), stream)))
    first_page = len(objects) + 1
    pages_id = first_page + len(contents)
    for content in contents:
        add(
            b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 612 792] /Contents %d 0 R"
            b" /Resources << /Font << /F1 %d 0 R >> >> >>" % (pages_id, content, font)
        )
    kids = b" ".join(b"%d 0 R" % (first_page + i) for i in range(len(contents)))
    add(b"<< /Type /Pages /Kids [%b] /Count %d >>" % (kids, len(contents)))
    catalog = add(b"<< /Type /Catalog /Pages %d 0 R >>" % pages_id)

    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n%b\nendobj\n" % (number, body))
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(
        b"trailer\n<< /Size %d /Root %d 0 R >>\nstartxref\n%d\n%%%%EOF\n"
        % (len(objects) + 1, catalog, xref)
    )
    return out.getvalue()


def zipped(parts: Mapping[str, str | bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, content in parts.items():
            archive.writestr(name, content)
    return out.getvalue()


def docx(body_xml: str) -> bytes:
    """A DOCX whose `w:body` holds `body_xml` (prefix `w`)."""
    return zipped(
        {
            "[Content_Types].xml": (
                '<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/'
                '2006/content-types"><Override PartName="/word/document.xml" ContentType='
                '"application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"'
                "/></Types>"
            ),
            "word/document.xml": (
                f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
                f'<w:document xmlns:w="{W_NS}"><w:body>{body_xml}</w:body></w:document>'
            ),
        }
    )


def slide(paragraphs: Sequence[Sequence[str]]) -> str:
    """A slide with one text box; each paragraph is a list of runs."""
    body = "".join(
        "<a:p>" + "".join(f"<a:r><a:t>{run}</a:t></a:r>" for run in runs) + "</a:p>"
        for runs in paragraphs
    )
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><p:sld xmlns:p="{P_NS}" xmlns:a="{A_NS}">'
        f"<p:cSld><p:spTree><p:sp><p:txBody>{body}</p:txBody></p:sp></p:spTree></p:cSld></p:sld>"
    )


def pptx(slides: Mapping[int, str | bytes], extra: Mapping[str, str] | None = None) -> bytes:
    """A PPTX with `ppt/slides/slide<n>.xml` for each entry (numbered as given)."""
    parts: dict[str, str | bytes] = {
        "ppt/presentation.xml": f'<?xml version="1.0"?><p:presentation xmlns:p="{P_NS}"/>'
    }
    parts.update({f"ppt/slides/slide{n}.xml": xml for n, xml in slides.items()})
    parts.update(extra or {})
    return zipped(parts)
