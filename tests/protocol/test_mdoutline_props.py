"""Properties of mdoutline over generated markdown: slices tile the content, subtrees are what
``section`` returns, anchors are unique, CRLF changes nothing but offsets, nothing ever raises."""

from __future__ import annotations

import re
import unicodedata

from hypothesis import given, settings
from hypothesis import strategies as st

from markproto.protocol.mdoutline import (
    Heading,
    headings,
    iter_own_sections,
    opening_paragraph,
    outline,
    own_sections,
    section,
    slug,
    split_frontmatter,
)

WORDS = st.text(alphabet="abcXYZ 019_-*`[]()<>&;#!\\|éßÜ\t", max_size=12)
PREFIXES = ["> ", ">", "- ", "* ", "1. ", "2) ", "  ", "   - ", "> - ", "    ", "\t", "> > "]
LINE = st.one_of(
    st.builds(lambda n, t: "#" * n + " " + t, st.integers(1, 7), WORDS),
    WORDS,
    st.sampled_from(["", "", "", "===", "---", "```", "~~~", "<div>", "</div>", "***", "[r]: /u"]),
    st.builds(str.__add__, st.sampled_from(PREFIXES), WORDS),
    st.builds(
        lambda p, n, t: p + "#" * n + " " + t,
        st.sampled_from(PREFIXES),
        st.integers(1, 3),
        WORDS,
    ),
    st.builds(str.__add__, st.sampled_from(PREFIXES), st.sampled_from(["---", "===", "```"])),
)
DOCS = st.builds(
    lambda front, lines, last: front + "\n".join(lines) + last,
    st.sampled_from(["", "", "---\ntitle: x\n---\n", "\ufeff"]),
    st.lists(LINE, max_size=25),
    st.sampled_from(["", "\n"]),
)


def content_of(body: str) -> str:
    return body[split_frontmatter(body)[1] :]


@settings(max_examples=150, deadline=None)
@given(DOCS)
def test_slices_tile_the_content(body: str) -> None:
    found = headings(body)
    sections = own_sections(body)
    assert len(sections) == len(found) + 1
    rebuilt = sections[0].text + "".join(
        body[h.start : h.line_end] + s.text for h, s in zip(found, sections[1:], strict=True)
    )
    assert rebuilt == content_of(body)


@settings(max_examples=150, deadline=None)
@given(DOCS)
def test_heading_fields_follow_the_rule(body: str) -> None:
    found = headings(body)
    starts = [h.start for h in found]
    assert starts == sorted(set(starts))
    assert len({h.anchor for h in found}) == len(found)
    for index, h in enumerate(found):
        assert 1 <= h.level <= 6
        assert h.start == 0 or body[h.start - 1] in "\n\ufeff"
        assert h.start < h.line_end <= h.end <= len(body)
        assert "\n" not in body[h.start : h.line_end - 1]
        later = [x.start for x in found[index + 1 :] if x.level <= h.level]
        assert h.end == (later[0] if later else len(body))
        span = body[h.start : h.end]
        assert h.lines == span.count("\n") + (not span.endswith("\n"))
        assert re.fullmatch(re.escape(slug(h.text)) + r"(?:-[0-9]+)*", h.anchor)


@settings(max_examples=150, deadline=None)
@given(DOCS)
def test_section_returns_the_subtree_of_each_anchor(body: str) -> None:
    for h in headings(body):
        assert section(body, h.anchor) == body[h.start : h.end]
        assert section(body, f" #{h.anchor}\t") == body[h.start : h.end]
        if h.anchor.isascii():
            assert section(body, h.anchor.upper()) == body[h.start : h.end]


@settings(max_examples=100, deadline=None)
@given(DOCS)
def test_crlf_changes_only_offsets(body: str) -> None:
    crlf = body.replace("\n", "\r\n")

    def moved(offset: int) -> int:
        return offset + body.count("\n", 0, offset)

    expected = [
        (h.level, h.text, h.anchor, h.lines, moved(h.start), moved(h.end), moved(h.line_end))
        for h in headings(body)
    ]
    assert [
        (h.level, h.text, h.anchor, h.lines, h.start, h.end, h.line_end) for h in headings(crlf)
    ] == expected
    assert [s.text for s in own_sections(crlf)] == [
        s.text.replace("\n", "\r\n") for s in own_sections(body)
    ]


@settings(max_examples=100, deadline=None)
@given(DOCS)
def test_the_prescan_never_hides_a_heading(body: str) -> None:
    """A body the cheap prescan calls heading-free is never parsed; a heading appended after a
    blank line (which can change no heading before it) forces the full parse of the same text,
    and that parse must find the same headings."""

    def seen(found: list[Heading]) -> list[tuple[int, str, str, int, int]]:
        return [
            (h.level, h.text, h.anchor, h.start, min(h.line_end, len(body)))
            for h in found
            if h.start < len(body)
        ]

    assert seen(headings(body + "\n\n# z\n")) == seen(headings(body))


@settings(max_examples=150, deadline=None)
@given(st.text(), st.text(max_size=10))
def test_never_raises_on_any_text(body: str, anchor: str) -> None:
    found = headings(body)
    assert own_sections(body)[0].level == 0
    assert outline(body).count("\n") == len(found)
    assert isinstance(opening_paragraph(body), str)
    result = section(body, anchor)
    assert result is None or result in body


@settings(max_examples=150, deadline=None)
@given(st.text())
def test_slug_keeps_only_anchor_characters(text: str) -> None:
    anchor = slug(text)
    assert len(anchor) <= len(text)
    assert slug(anchor) == anchor
    assert all(c in "-_" or unicodedata.category(c)[0] in "LN" for c in anchor)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=127)))
def test_ascii_slug_is_the_rune_rule(text: str) -> None:
    # an ASCII heading takes a byte table; past a non-ASCII rune the same text takes the rune
    # rule, and a slug is rune by rune, so both give the same slug
    assert slug(text + "\u00e9") == slug(text) + "\u00e9"
    assert slug("\u00e9" + text) == "\u00e9" + slug(text)


YAML_LINES = st.lists(
    st.text(alphabet="abc: -.#'\"\t", max_size=10).filter(
        lambda line: re.fullmatch(r"(?:---|\.\.\.)[ \t]*", line) is None
    ),
    max_size=8,
)


@settings(max_examples=150, deadline=None)
@given(YAML_LINES, st.sampled_from(["---", "..."]), st.sampled_from(["\n", "\r\n"]), st.text())
def test_split_frontmatter_returns_what_was_written(
    yaml_lines: list[str], closer: str, eol: str, content: str
) -> None:
    yaml_text = "".join(line + eol for line in yaml_lines)
    body = "---" + eol + yaml_text + closer + eol + content
    assert split_frontmatter(body) == (yaml_text, len(body) - len(content))


@settings(max_examples=200, deadline=None)
@given(
    DOCS.map(lambda body: body.encode("utf-8", "surrogatepass")),
    st.sampled_from([b"", b"\xff", b"\xc3", b"\xe2\x82", b"\r\n\xff\n"]),
)
def test_bytes_cut_as_their_decoded_text(data: bytes, junk: bytes) -> None:
    """A body given as bytes (never decoded whole: the server's index) is cut exactly as its
    decoded text, with byte offsets; invalid sequences read as U+FFFD either way."""
    body = data.replace(b"a", junk, 1)
    text = body.decode("utf-8", "replace")
    from_bytes = list(iter_own_sections(body))
    from_text = list(iter_own_sections(text))
    assert [s for _, _, s in from_bytes] == [s for _, _, s in from_text]
    for start, stop, own in from_bytes:
        assert body[start:stop].decode("utf-8", "replace") == own.text
    assert split_frontmatter(body)[0] == split_frontmatter(text)[0]
    if not junk:
        assert [(len(text[:a].encode()), len(text[:b].encode())) for a, b, _ in from_text] == [
            (a, b) for a, b, _ in from_bytes
        ]
