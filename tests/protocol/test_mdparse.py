"""mdparse's records: what mdoutline builds on (lines, offsets, texts, the first paragraph), on
content that has no frontmatter left."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from markproto.protocol import mdparse, mdtokens
from markproto.protocol.mdparse import ParsedHeading, find_headings
from markproto.protocol.mdtokens import first_paragraph


def test_headings_carry_their_first_line() -> None:
    content = "intro\r\n# One *a*\r\n\r\nFoo\r\nBar\r\n===\r\n> ## Quoted"
    assert find_headings(content) == [
        ParsedHeading(1, "One a", 1, 7, 18),
        ParsedHeading(1, "FooBar", 3, 20, 25),  # setext: the text's first line, not the underline
        ParsedHeading(2, "Quoted", 6, 35, 46),  # the last line has no newline
    ]
    assert content[7:18] == "# One *a*\r\n"


def test_no_headings_where_the_parse_finds_none() -> None:
    assert find_headings("") == []
    assert find_headings("```\n# code\n```\n    # indented\n<div>\n# html\n</div>\n#\n") == []
    assert find_headings("> " * 5000 + "# deep\n") == []  # deeper than the stack: nothing


def test_first_paragraph_spans_its_source_lines() -> None:
    content = "# T\n\n> quoted\n\n  first *line*\nsecond\n\nthird\n"
    start, end = first_paragraph(content) or (0, 0)
    assert content[start:end] == "  first *line*\nsecond\n"
    assert first_paragraph("last line") == (0, 9)
    assert first_paragraph("# only\n- item\n") is None


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.sampled_from([*"ab1. #=->*`~[]()<\n\r\t\\"]), max_size=80))
def test_records_point_at_their_lines(content: str) -> None:
    lines = content.split("\n")
    for heading in find_headings(content):
        assert 1 <= heading.level <= 6
        assert heading.start == sum(len(line) + 1 for line in lines[: heading.line])
        assert heading.line_end == min(heading.start + len(lines[heading.line]) + 1, len(content))
    span = first_paragraph(content)
    if span is not None:
        assert content[span[0] : span[1]].strip()


BLOCK_LINES = st.lists(
    st.sampled_from(
        [
            "# top",
            "## sub *em*",
            "#",
            "text [ref]",
            "[ref]: /u 'title",
            "[ref]: /v",
            "'",
            "```",
            "~~~",
            "    code",
            "<div>",
            "<!-- open",
            "-->",
            "<pre>",
            "</pre>",
            "> # quoted",
            "- # item",
            "  # indented",
            "===",
            "---",
            "",
            "",
            "Title *a*",
            "text",
            "- item",
            "1. step",
            "2) next",
            "  - nested",
            "    more",
            "> quote",
            ">",
            "\u00a0",
            "\u00a0 x",
            "\t- tab",
            "[ref]",
            "]",
        ]
    ),
    max_size=40,
).map("\n".join)


@settings(max_examples=300, deadline=None)
@given(BLOCK_LINES, st.integers(1, 40), st.booleans(), st.booleans())
def test_pieces_parse_as_the_whole(content: str, chunk: int, crlf: bool, as_bytes: bool) -> None:
    """Parsing in pieces (bounded memory on a large document) finds what one parse finds:
    fences, HTML blocks and link definitions left open at a piece's end are never cut, nor is
    a paragraph, a list item or a quote a later line may still continue."""
    form: str | bytes = content.replace("\n", "\r\n") if crlf else content
    form = form.encode() if as_bytes else form
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(mdparse, "SCAN", False)
        whole = find_headings(form, chunk=len(form) + 1)
        assert find_headings(form, chunk=chunk) == whole
    assert find_headings(form, chunk=chunk) == whole


HEADING_SOURCE = (
    st.lists(
        st.sampled_from([*"ab `*_é [&!<(,'", "**", "](", "](/u)", "](h:x)", "&a"]), max_size=20
    )
    .map("".join)
    .filter(lambda source: source != "" and source.strip() == source)
)


@settings(max_examples=1500, deadline=None)
@given(HEADING_SOURCE, st.booleans())
def test_quick_headings_read_without_mistletoe_as_mistletoe_reads_them(
    source: str, defined: bool
) -> None:
    """A heading whose only inline syntax is code spans, simple emphasis or plain links skips
    mistletoe's inline parser: the text is what that parser gives, wherever the quick reading
    applies, whatever link references the document defines."""
    quick = mdparse._quick_text(source)
    if quick is None:
        return
    definitions = mdtokens.parse_piece(["[a]: /d", "[b]: /e"])[3] if defined else {}
    with mdtokens.inline_parser(definitions) as parse:
        want = parse(source)
    assert quick == want
    assert [heading.text for heading in find_headings(f"# {source}\n")] == [want]
