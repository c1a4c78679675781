"""The heading pass reads most pieces without mistletoe (``mdparse._scan``): it must find exactly
what the mistletoe parse finds, on any content, as text or as UTF-8 bytes, in pieces of any size."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from markproto.protocol import mdparse
from markproto.protocol.mdparse import ParsedHeading, find_headings

LINES = [
    # what the scan reads
    "# top",
    "## sub *em* ##",
    "###### six [ref]",
    "#",
    "# ",
    "#\tx #",
    "text",
    "more text `code` <b>x</b>",
    "",
    "",
    "  ",
    "\u00a0",
    "```",
    "```py",
    "````",
    "``` x",
    "```x`y",
    "~~~",
    "~~~ `a`",
    "[link](/x.md) text",
    "[open",
    "close]",
    " [r]",
    "<div>",
    "</div>",
    "<span>x</span>",
    "<!-- open",
    "<!-- c -->",
    "-->",
    "<pre>",
    "<PRE>",
    "</pre>",
    "</style>",
    "<?php",
    "?>",
    "<!DOCTYPE",
    "<![CDATA[",
    "]]>",
    "\t<div>",
    "    <div>",
    "  <p>",
    "- item",
    "* [x] task",
    "1. step",
    "> quote",
    "    code",
    "\tcode",
    "é ü 日本",
    "---",
    "===",
    "- - -",
    "-",
    "  ---",
    "    # code comment",
    "  # yaml comment",
    "> # in code",
    "   ```",
    "  ~~~ x",
    "def f() -> list[A]:",
    "x[1]: y",
]
OTHERS = [
    # what sends a piece to mistletoe
    "[ref]: /u 'title",
    "- # item",
    "> # quoted",
    "  # indented",
    "  ```",
    "#\r",
]
PLAIN = st.sampled_from(["text", "", "", "# top", "## sub", "- item", "more `x`"])
TEXT = st.one_of(
    st.lists(st.one_of(PLAIN, PLAIN, PLAIN, st.sampled_from(LINES)), max_size=40),
    st.lists(st.sampled_from(LINES + OTHERS), max_size=40),
).map("\n".join)
"""Mostly plain lines with a few the scan must follow, and any lines (most pieces then go to
mistletoe)."""
CONTENT = st.builds(
    lambda text, end, crlf: (text + end).replace("\n", "\r\n") if crlf else text + end,
    TEXT,
    st.sampled_from(["", "\n"]),
    st.booleans(),
)


def both(content: str | bytes, chunk: int) -> tuple[list[ParsedHeading], list[ParsedHeading]]:
    scanned = find_headings(content, chunk=chunk)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(mdparse, "SCAN", False)
        parsed = find_headings(content, chunk=chunk)
    return scanned, parsed


@settings(max_examples=600, deadline=None)
@given(CONTENT, st.integers(1, 60))
def test_the_scan_finds_what_mistletoe_finds(content: str, chunk: int) -> None:
    scanned, parsed = both(content, chunk)
    assert scanned == parsed


@settings(max_examples=200, deadline=None)
@given(CONTENT, st.integers(1, 60), st.sampled_from([b"", b"\xff", b"\xe2\x82"]))
def test_the_scan_finds_what_mistletoe_finds_in_bytes(
    content: str, chunk: int, junk: bytes
) -> None:
    data = content.encode()
    middle = data.find(b"\n", len(data) // 2)
    if middle >= 0:
        data = data[:middle] + junk + data[middle:]
    scanned, parsed = both(data, chunk)
    assert scanned == parsed


@pytest.mark.parametrize(
    "content",
    [
        "# a\n```\n# hidden\n```\n# b\n",
        "# a\n````\n# hidden\n```\n# hidden too\n````\n# b\n",
        "# a\n```x`y\n# b\n",
        "# a\n<div>\n# hidden\n\n# b\n",
        "# a\n<span>x</span>\n# b\n",
        "# a\n- item\n<div>\n# hidden\n\n# b\n",
        "# a\n<!--\n\n# hidden\n-->\n# b\n",
        "# a\n<!--\n# hidden -->\n# b\n",
        "# a\n<pre>\n# hidden\n</style>\n# b\n",
        "# a\n[x\n# b]: /u\n\n# c\n",
        "# a\n[x\n" + "text\n" * 300 + "# b]: /u\n",
        "# a\n<div>\n" + "text\n" * 300 + "# b\n",
        "# a\n```\n" + "text\n" * 300 + "# b\n",
        "- a\n\u00a0\u00a0# x\n# y\n",
        "> a\n# b\n- c\n# d\n",
        "# a\n```\n    # code\n  ```\n# b\n",
        "# a\n```\n    # code\n    ```\n# hidden\n```\n# b\n",
        "# a\n```\nx[1]: y\n```\n# b\n",
        "# a\n[x\n```\n# b]: /u\n```\n# c\n",
        "# a\n[x\n\n```\n# b]: /u\n```\n# c [x]\n",
        "# a\n```\n[x]: /u\n```\n[x]: /v\n# c [x]\n",
        "# a\n[x]: /u\n```\n]: y\n```\n# c [x]\n",
    ],
)
def test_the_scan_agrees_on_what_may_hide_a_heading(content: str) -> None:
    for chunk in (1, 16, 4096):
        for form in (content, content.encode()):
            scanned, parsed = both(form, chunk)
            assert scanned == parsed


def _corpus_lines() -> list[str]:
    """Every line of the shared corpora's documents (the test skips where they are absent)."""
    from support import shared_path

    out: list[str] = []
    for corpus in ("fastapi-docs", "prometheus-docs"):
        for path in sorted(shared_path("corpus", corpus).rglob("*.md")):
            out += path.read_text(encoding="utf-8", errors="replace").split("\n")
    return out


@pytest.fixture(scope="module")
def corpus_lines() -> list[str]:
    return _corpus_lines()


@settings(max_examples=300, deadline=None)
@given(st.data(), st.integers(1, 60), st.booleans())
def test_the_scan_finds_what_mistletoe_finds_in_real_lines(
    corpus_lines: list[str], data: st.DataObject, chunk: int, as_bytes: bool
) -> None:
    """Real documents' lines, a run of them or picked anywhere and mixed with lines the scan
    must follow: what real content holds (admonitions, tables, nested lists, HTML) beside the
    hand-picked ``LINES``."""
    size = len(corpus_lines)
    if data.draw(st.booleans(), label="a run"):
        start = data.draw(st.integers(0, size - 1), label="start")
        lines = corpus_lines[start : start + data.draw(st.integers(1, 60), label="lines")]
    else:
        picks = st.one_of(
            st.integers(0, size - 1).map(corpus_lines.__getitem__), st.sampled_from(LINES + OTHERS)
        )
        lines = data.draw(st.lists(picks, min_size=1, max_size=40), label="lines")
    content = "\n".join(lines) + "\n"
    scanned, parsed = both(content.encode() if as_bytes else content, chunk)
    assert scanned == parsed
