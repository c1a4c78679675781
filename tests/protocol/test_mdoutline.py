"""mdoutline: the reference's examples (SPEC §9), CommonMark edge cases, our own
decisions (frontmatter, BOM, CRLF, entities and escapes), and the FastAPI corpus."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import mistletoe
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from markproto.protocol.mdoutline import (
    Heading,
    OwnSection,
    anchor_suffixes,
    headings,
    opening_paragraph,
    outline,
    own_sections,
    section,
    slug,
    split_frontmatter,
)


def found(body: str) -> list[tuple[int, str]]:
    return [(h.level, h.text) for h in headings(body)]


# --- §9 and §10.4: the reference's own examples ------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("QUIC UDP Buffer Size Warning", "quic-udp-buffer-size-warning"),
        ("Setext Title", "setext-title"),
        ("Papaya reverts on restart", "papaya-reverts-on-restart"),
        ("Über!", "über"),
        ("C++ & Go", "c--go"),
        ("a  b", "a--b"),
        ("snake_case-and-dash", "snake_case-and-dash"),
        ("Emoji 🎉 here", "emoji--here"),
        ("", ""),
    ],
)
def test_slug_reference_examples(text: str, expected: str) -> None:
    assert slug(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("İx", "ix"),  # Go ToLower is per rune and one rune: str.lower() would give "i̇x"
        ("ΟΔΟΣ", "οδοσ"),  # no final-sigma context rule
        ("ǅungla", "ǆungla"),  # title case lowers too
        ("a\x1cb\x1fc", "abc"),  # Python calls these spaces, Go does not
        ("a\u3000b\xa0c\u2028d\x85e\tf", "a-b-c-d-e-f"),  # Go unicode.IsSpace
        ("x² ⅷ ३", "x²-ⅷ-३"),  # unicode.IsNumber is every N* category
        ("日本語の見出し", "日本語の見出し"),
        ("«quoted» (paren) [b] {c}", "quoted-paren-b-c"),
    ],
)
def test_slug_follows_go_unicode(text: str, expected: str) -> None:
    assert slug(text) == expected


def test_dedupe_counts_generated_names_as_used() -> None:
    body = "# Notes\n\n# Notes\n\n# Notes-1\n\n# Notes\n"
    assert [h.anchor for h in headings(body)] == ["notes", "notes-1", "notes-1-1", "notes-2"]


def test_all_punctuation_headings_get_empty_then_numbered_anchors() -> None:
    assert [h.anchor for h in headings("# !!!\n\n## ???\n\n# ...\n")] == ["", "-1", "-2"]


def _suffixes_as_written(texts: list[str]) -> list[int]:
    """The dedupe of §9 literally: every anchor given kept, a taken slug counting on from the
    last suffix it took."""
    used: set[str] = set()
    last: dict[str, int] = {}
    out = []
    for text in texts:
        base = slug(text)
        candidate, suffix = base, 0
        if candidate in used:
            suffix = last.get(base, 0)
            while candidate in used:
                suffix += 1
                candidate = f"{base}-{suffix}"
            last[base] = suffix
        used.add(candidate)
        out.append(suffix)
    return out


@settings(max_examples=500, deadline=None)
@given(st.lists(st.text(alphabet="a-01 2", max_size=6), max_size=40))
def test_anchor_suffixes_are_the_literal_dedupes(texts: list[str]) -> None:
    """The suffixes, which keep only unsuffixed anchors, are those of keeping every anchor."""
    assert list(anchor_suffixes(texts)) == _suffixes_as_written(texts)


SETEXT_EXAMPLE = (
    "Preamble text.\n\nSetext Title\n============\n\nunder setext\n\n## Child\n\nchild text\n\n"
    "### Grandchild\n\ndeep text\n\n## Sibling\n"
)


def test_own_sections_reference_example() -> None:
    assert own_sections(SETEXT_EXAMPLE) == [
        OwnSection("", "", 0, (), "Preamble text.\n\n"),
        OwnSection(
            "setext-title",
            "Setext Title",
            1,
            ("Setext Title",),
            "============\n\nunder setext\n\n",  # the underline is own text; stripMarkup drops it
        ),
        OwnSection("child", "Child", 2, ("Setext Title", "Child"), "\nchild text\n\n"),
        OwnSection(
            "grandchild",
            "Grandchild",
            3,
            ("Setext Title", "Child", "Grandchild"),
            "\ndeep text\n\n",
        ),
        OwnSection("sibling", "Sibling", 2, ("Setext Title", "Sibling"), ""),
    ]


def test_headings_reference_example_offsets() -> None:
    assert headings(SETEXT_EXAMPLE) == [
        Heading(1, "Setext Title", "setext-title", 16, 117, 14, 29),
        Heading(2, "Child", "child", 57, 106, 8, 66),
        Heading(3, "Grandchild", "grandchild", 79, 106, 4, 94),
        Heading(2, "Sibling", "sibling", 106, 117, 1, 117),
    ]
    assert SETEXT_EXAMPLE[16:29] == "Setext Title\n"


LOOKUP_BODY = "# Alpha\n\nSecond body.\n\n## Details\n\nSee [beta](b.md).\n\n## Appended\n\nMore.\n"


def test_lookup_body_golden_document() -> None:
    sections = own_sections(LOOKUP_BODY)
    assert [(s.anchor, s.trail, s.text) for s in sections] == [
        ("", (), ""),
        ("alpha", ("Alpha",), "\nSecond body.\n\n"),
        ("details", ("Alpha", "Details"), "\nSee [beta](b.md).\n\n"),
        ("appended", ("Alpha", "Appended"), "\nMore.\n"),
    ]


def test_outline_format() -> None:
    assert outline(LOOKUP_BODY) == (
        "- Alpha (#alpha, 11 lines)\n  - Details (#details, 4 lines)\n"
        "  - Appended (#appended, 3 lines)\n"
    )
    assert outline("no headings here\n") == ""
    assert outline("# A\nlast line without newline") == "- A (#a, 2 lines)\n"


# --- section ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("anchor", "expected"),
    [
        ("details", "## Details\n\nSee [beta](b.md).\n\n"),
        ("#details", "## Details\n\nSee [beta](b.md).\n\n"),
        ("  DETAILS \n", "## Details\n\nSee [beta](b.md).\n\n"),
        ("Appended", "## Appended\n\nMore.\n"),
        ("alpha", LOOKUP_BODY),
        ("missing", None),
        (
            "##details",
            "## Details\n\nSee [beta](b.md).\n\n",
        ),  # one # goes, the slug drops the other
    ],
)
def test_section_is_the_subtree(anchor: str, expected: str | None) -> None:
    assert section(LOOKUP_BODY, anchor) == expected


def test_section_falls_back_to_the_slug_of_raw_heading_text() -> None:
    body = "# Problem Statement\n\nx\n\n# C++ & Go\n\ny\n"
    assert section(body, "Problem Statement") == "# Problem Statement\n\nx\n\n"
    assert section(body, "C++ & Go") == "# C++ & Go\n\ny\n"


def test_section_prefers_the_anchor_over_a_slug_match_later() -> None:
    body = "# a-b\n\none\n\n# A B\n\ntwo\n"  # anchors: a-b, a-b-1
    assert section(body, "a-b") == "# a-b\n\none\n\n"
    assert section(body, "A-B-1") == "# A B\n\ntwo\n"


def test_section_matches_by_simple_case_folding_like_go_equal_fold() -> None:
    body = "# Straße\n\nx\n\n# Kelvin\n\ny\n"
    assert section(body, "STRAẞE") == "# Straße\n\nx\n\n"  # ẞ and ß fold together
    assert section(body, "STRASSE") is None  # full case folding (casefold) would say yes
    assert section(body, "\u212aelvin") == "# Kelvin\n\ny\n"  # KELVIN SIGN folds to k
    turkish = "# Kılıç\n\nz\n"
    assert section(turkish, "KıLıÇ") == turkish
    assert section(turkish, "KILIÇ") is None  # dotless ı does not fold to I, nor I to ı
    assert section("# Mass\n", "MAſS") == "# Mass\n"  # long s folds to s


def test_section_with_the_empty_anchor() -> None:
    assert section("# !!!\n\nx\n", "#") == "# !!!\n\nx\n"
    assert section("# title\n", "") is None


# --- CommonMark block structure ----------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        "```\n# x\n```\n",
        "~~~\n# x\n~~~\n",
        "````\n```\n# x\n````\n",  # a shorter fence does not close a longer one
        "~~~\n```\n# x\n",  # an unclosed fence runs to the end
        "```\n# x\n",
        "    # x\n",
        "\t# x\n",
        "<div>\n# x\n</div>\n",
        "<!-- comment\n# x\n-->\n",
        "<pre>\n# x\n</textarea>\n",  # any raw-text closing tag ends it... after this line
        "#5 bolt\n",
        "#hashtag\n",
        "\\# escaped\n",
        "para\n\n---\n",
        "[a]: /url\n---\n",  # a paragraph of definitions only: the --- is a thematic break
        "[a]: /url\n===\n",
        "- foo\n===\n",  # a lazy line never underlines
        "> foo\n===\n",
        "> foo\n---\n",
        "Foo\n= =\n",
        "Foo\n=-=\n",
        "Foo\n    ===\n",
        "#\n",
        "# #\n",
        "### ###\n",
        "####### seven\n",
    ],
)
def test_no_heading(body: str) -> None:
    assert headings(body) == []


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("<div>\n\n# x\n", [(1, "x")]),  # a blank line ends the HTML block
        ("Foo\n===\n", [(1, "Foo")]),
        ("Foo\n---\n", [(2, "Foo")]),
        ("Foo\n  ===  \n", [(1, "Foo")]),
        ("Foo\nBar\n===\n", [(1, "FooBar")]),  # soft breaks contribute nothing
        ("> Foo\n> ---\n", [(2, "Foo")]),  # goldmark finds setext in quotes, mistletoe did not
        ("> Foo\n> Bar\n> ===\n", [(1, "FooBar")]),
        ("> > Deep\n> > ---\n", [(2, "Deep")]),
        ("- Item\n  ---\n", [(2, "Item")]),
        ("Word | x\n---\n", [(2, "Word | x")]),  # no tables
        ("para\n---\n", [(2, "para")]),
        ("[a]: /url\nTitle\n===\n", [(1, "Title")]),
        ("[a]: /url\n<b>Bold</b> text\n---\n", [(2, "Bold text")]),
        ("- # A\n  - ## B\n    1. ### C\n", [(1, "A"), (2, "B"), (3, "C")]),
        ("> - > # deep\n", [(1, "deep")]),
        ("-\n  # after a bare marker\n", [(1, "after a bare marker")]),
        ("1. a\n\n   # b\n", [(1, "b")]),
        ("   # three spaces\n", [(1, "three spaces")]),
        ("#\tx\n", [(1, "x")]),
        ("> ```\n> code\nlazy\n---\n", [(2, "lazy")]),  # no lazy line into a fence
        ("- # heading\nnot lazy\n---\n", [(1, "heading"), (2, "not lazy")]),
        ("<div>\n# x\n</div>\n\n# y\n", [(1, "y")]),
        ("<pre>\n# x\n</textarea>\n# y\n", [(1, "y")]),
        (") not a list\n===\n", [(1, ") not a list")]),
    ],
)
def test_headings_found(body: str, expected: list[tuple[int, str]]) -> None:
    assert found(body) == expected


def test_nested_heading_offsets_are_those_of_their_own_line() -> None:
    body = "intro\n\n> quoted\n>\n> ## In quote\n\n- item\n\n  ### In item\n"
    first, second = headings(body)
    assert body[first.start : first.line_end] == "> ## In quote\n"
    assert body[second.start : second.line_end] == "  ### In item\n"


def test_setext_start_is_the_text_line_and_line_end_its_end() -> None:
    body = "x\n\nTitle\nmore\n-----\n\nbody\n"
    (heading,) = headings(body)
    assert (heading.start, heading.line_end) == (3, 9)
    assert own_sections(body)[1].text == "more\n-----\n\nbody\n"


# --- heading text -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "text"),
    [
        ("# foo ##", "foo"),
        ("# foo#", "foo#"),
        ("# foo \\#", "foo #"),
        ("#   spaced   out   ", "spaced   out"),
        ("# *em* **strong** _u_ __uu__", "em strong u uu"),
        ("# `code *x*` and ``a ` b``", "code *x* and a ` b"),
        ("# [link *text*](http://x.y 'title')", "link text"),
        ("# ![alt *text*](img.png)", "alt text"),
        ("# auto <http://x.y> and <a@b.co>", "auto  and "),
        ("# raw <b>html</b> <!-- c -->", "raw html "),
        ("# ~~not struck~~", "~~not struck~~"),
        ("# snake_case_name", "snake_case_name"),
        ("# [ref] and [x][ref]\n\n[ref]: /u", "ref and x"),
        ("# [undefined][nope]", "[undefined][nope]"),
        # §14 leaves escapes and entities to us: we follow CommonMark and resolve them.
        ("# a \\* b \\_ c \\\\ d", "a * b _ c \\ d"),
        ("# AT&amp;T &copy; &#35; &#x41;", "AT&T © # A"),
        ("# &bogus; &amp", "&bogus; &amp"),
        ("# a &nbsp; b", "a \xa0 b"),
    ],
)
def test_heading_text(source: str, text: str) -> None:
    assert [h.text for h in headings(source + "\n")] == [text]


def test_escape_and_entity_anchor() -> None:
    assert [h.anchor for h in headings("# Tom &amp; Jerry \\*\n")] == ["tom--jerry-"]


# --- frontmatter, BOM, CRLF --------------------------------------------------------------------


FM_BODY = "---\ntitle: x\ntags: a, b\n---\n# Real\n\nbody\n"


def test_frontmatter_is_metadata_not_content() -> None:
    assert split_frontmatter(FM_BODY) == ("title: x\ntags: a, b\n", 28)
    assert found(FM_BODY) == [(1, "Real")]
    assert own_sections(FM_BODY)[0] == OwnSection("", "", 0, (), "")
    assert headings(FM_BODY)[0].start == 28


def test_frontmatter_key_is_not_a_setext_heading() -> None:
    body = "---\ntitle: x\n---\n\nintro\n"
    assert headings(body) == []
    assert own_sections(body) == [OwnSection("", "", 0, (), "\nintro\n")]
    assert opening_paragraph(body) == "intro"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("---\na: 1\n...\nrest", ("a: 1\n", 13)),
        ("---\n---\n", ("", 8)),
        ("---   \na: 1\n---\t\n", ("a: 1\n", 17)),
        ("---\r\na: 1\r\n---\r\nrest", ("a: 1\r\n", 16)),
        ("\ufeff---\na: 1\n---\n", ("a: 1\n", 14)),
        ("---\na: 1\n---", ("a: 1\n", 12)),
        ("---\na: 1\n", (None, 0)),  # never closed
        ("\ufeff---\na: 1\n", (None, 1)),
        ("----\na: 1\n----\n", (None, 0)),
        ("text\n---\na: 1\n---\n", (None, 0)),  # only at the very start
        ("\n---\na: 1\n---\n", (None, 0)),
        ("---\n", (None, 0)),
        ("---", (None, 0)),
        ("", (None, 0)),
    ],
)
def test_split_frontmatter(body: str, expected: tuple[str | None, int]) -> None:
    assert split_frontmatter(body) == expected


def test_frontmatter_has_a_size_bound() -> None:
    far = "---\n" + "a: b\n" * 20_000 + "---\n# Heading\n"  # 100 KB: not a metadata block
    assert split_frontmatter(far) == (None, 0)
    assert found(far) == [(2, "a: b" * 20_000), (1, "Heading")]
    near = "---\n" + "a: b\n" * 100 + "---\n# Heading\n"
    assert found(near) == [(1, "Heading")]


def test_thematic_break_later_is_not_frontmatter() -> None:
    body = "# Top\n\n---\ntitle: x\n---\n"
    assert split_frontmatter(body) == (None, 0)
    assert found(body) == [(1, "Top"), (2, "title: x")]


def test_bom_is_not_content() -> None:
    body = "\ufeff# Title\n\ntext\n"
    (heading,) = headings(body)
    assert (heading.start, heading.line_end, heading.end) == (1, 9, len(body))
    assert own_sections(body)[0].text == ""
    assert section(body, "title") == "# Title\n\ntext\n"


def test_crlf_offsets_and_slices_keep_crlf() -> None:
    body = "intro\r\n\r\n# A\r\n\r\nalpha\r\n\r\nSub\r\n---\r\n\r\nsub text\r\n# B\r\nbeta"
    assert [(h.level, h.text, h.anchor) for h in headings(body)] == [
        (1, "A", "a"),
        (2, "Sub", "sub"),
        (1, "B", "b"),
    ]
    assert section(body, "a") == "# A\r\n\r\nalpha\r\n\r\nSub\r\n---\r\n\r\nsub text\r\n"
    assert [s.text for s in own_sections(body)] == [
        "intro\r\n\r\n",
        "\r\nalpha\r\n\r\n",
        "---\r\n\r\nsub text\r\n",
        "beta",
    ]
    assert outline(body) == "- A (#a, 8 lines)\n  - Sub (#sub, 4 lines)\n- B (#b, 2 lines)\n"


def test_only_newline_ends_a_line() -> None:
    body = "# A\x0bB\u2028C\n\ntext\x1c\n\n## D\n"  # str.splitlines would split all of these
    assert [(h.text, h.start) for h in headings(body)] == [("A\x0bB\u2028C", 0), ("D", 16)]


# --- opening_paragraph and own_sections --------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("# Title\n\n  First line\n  second line  \n\nNext.\n", "First line\n  second line"),
        ("> quoted\n\n- item\n\nTop level.\n", "Top level."),
        ("[ref]: /u\nText after refs.\n", "Text after refs."),
        ("Setext\n===\n\nPara.\n", "Para."),
        ("```\ncode\n```\n", ""),
        ("", ""),
        ("---\ntitle: x\n---\nBody para\r\ncontinues\r\n\r\nnext", "Body para\r\ncontinues"),
    ],
)
def test_opening_paragraph(body: str, expected: str) -> None:
    assert opening_paragraph(body) == expected


def test_preamble_is_always_first() -> None:
    assert own_sections("") == [OwnSection("", "", 0, (), "")]
    assert own_sections("just text\n") == [OwnSection("", "", 0, (), "just text\n")]
    assert own_sections("# A\n")[0] == OwnSection("", "", 0, (), "")
    assert own_sections("\n\n# A\n")[0] == OwnSection("", "", 0, (), "\n\n")


def test_trail_pops_equal_and_deeper_levels() -> None:
    body = "## B\n# A\n### C\n## D\n#### E\n### F\n"
    assert [s.trail for s in own_sections(body)[1:]] == [
        ("B",),
        ("A",),
        ("A", "C"),
        ("A", "D"),
        ("A", "D", "E"),
        ("A", "D", "F"),
    ]


def test_subtree_ends_at_next_heading_of_same_or_higher_level() -> None:
    body = "# A\n## B\n### C\n## D\n# E\n"
    assert [(h.anchor, body[h.start : h.end]) for h in headings(body)] == [
        ("a", "# A\n## B\n### C\n## D\n"),
        ("b", "## B\n### C\n"),
        ("c", "### C\n"),
        ("d", "## D\n"),
        ("e", "# E\n"),
    ]
    assert [h.lines for h in headings(body)] == [4, 2, 1, 1, 1]


# --- bounded work on hostile input -------------------------------------------------------------


def test_nesting_deeper_than_the_stack_has_no_headings() -> None:
    for body in (">" * 3000 + " # x\n", "- " * 3000 + "# x\n", "> - " * 1000 + "# x\n"):
        assert headings(body) == []
        assert own_sections(body) == [OwnSection("", "", 0, (), body)]
        assert opening_paragraph(body) == ""


def test_long_heading_sources_get_the_linear_text() -> None:
    short = "# " + "*a* " * 100 + "\\* &amp;\n"
    assert headings(short)[0].text == "a " * 100 + "* &"
    long = "# " + "*a* " * 300 + "\\* &amp;\n"  # past 1024 characters: markup stays
    assert headings(long)[0].text == "*a* " * 300 + "* &"
    crafted = "# " + "[a](" * 30_000 + "\n"  # quadratic for mistletoe's inline parser
    assert headings(crafted)[0].text == "[a](" * 30_000


def test_inline_parsing_has_a_budget_per_document() -> None:
    body = "".join(f"# *h{i}* " + "x" * 1000 + "\n" for i in range(40))
    texts = [h.text for h in headings(body)]
    assert texts[0].startswith("h0 x")
    assert texts[-1].startswith("*h39* x")  # 32 KiB of inline parsing spent by then


def test_many_duplicate_headings() -> None:
    anchors = [h.anchor for h in headings("# a\n" * 5000)]
    assert anchors[:3] == ["a", "a-1", "a-2"]
    assert anchors[-1] == "a-4999"
    assert len(set(anchors)) == 5000


def test_many_link_reference_definitions() -> None:
    body = "[a]: /u\n" * 2000 + "[x]: /y 'title'\nText [x]\n---\n"
    (heading,) = headings(body)
    assert (heading.text, heading.start) == ("Text x", body.index("Text"))


# --- mistletoe's global state ------------------------------------------------------------------


MISTLETOE_SAMPLE = (
    "> Foo\n> ---\n\nWord | x\n---\n\n~~gone~~ <b>kept</b> [link][r] `code`\n\n[r]: /u\n"
    "<div>\nblock\n</div>\n\n    indented\n\n```\nfenced\n```\n"
)


def test_mistletoe_state_is_left_as_found() -> None:
    """Parsing swaps mistletoe's global token lists and patches its rules for a moment; after
    it, mistletoe renders every construct it knows exactly as before (tables, strikethrough,
    raw HTML, reference links, code)."""
    before = mistletoe.markdown(MISTLETOE_SAMPLE)
    headings("> Foo\n> ---\n\n[r]: /u\n<b>x</b>\n---\n\n# [x][r] ~~s~~ <b>h</b>\n")
    opening_paragraph("para\n")
    assert mistletoe.markdown(MISTLETOE_SAMPLE) == before
    assert "<del>gone</del>" in before and '<a href="/u">link</a>' in before
    assert "<table>" in before and "<b>kept</b>" in before


def test_parses_are_serialized_across_threads() -> None:
    bodies = [f"# Doc {i}\n\n> Quote {i}\n> ---\n\n- item\n  ## Sub {i}\n" for i in range(40)]
    expected = [headings(body) for body in bodies]  # 40 bodies outrun the small parse cache
    failures: list[int] = []

    def work(step: int) -> None:
        for i in range(0, 400, step):
            if headings(bodies[i % 40]) != expected[i % 40]:
                failures.append(i)

    threads = [threading.Thread(target=work, args=(step,)) for step in (1, 3, 7, 11)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


# --- the FastAPI corpus ------------------------------------------------------------------------

_FENCE_LINE = re.compile(r" {0,3}(`{3,}|~{3,})")


def _has_h1_line_outside_fences(body: str) -> bool:
    fence = None
    for line in body.split("\n"):
        opener = _FENCE_LINE.match(line)
        if fence is None and opener:
            fence = opener.group(1)
        elif fence is not None and line.strip().startswith(fence):
            fence = None
        elif fence is None and line.startswith("# "):
            return True
    return False


def test_corpus(corpus_dir: Path) -> None:
    files = sorted(corpus_dir.rglob("*.md"))
    assert len(files) > 100
    total = 0
    for path in files:
        body = path.read_text(encoding="utf-8")
        found_ = headings(body)
        total += len(found_)
        if _has_h1_line_outside_fences(body[split_frontmatter(body)[1] :]):
            assert any(h.level == 1 for h in found_), path
        assert len({h.anchor for h in found_}) == len(found_), path
        for h in found_:
            sub = section(body, h.anchor)
            assert sub is not None, (path, h.anchor)
            first = next(x for x in found_ if x.anchor.lower() == h.anchor.lower())
            assert sub == body[first.start : first.end]
            assert sub.startswith(body[first.start : first.line_end])
        sections = own_sections(body)
        rebuilt = sections[0].text + "".join(
            body[h.start : h.line_end] + s.text for h, s in zip(found_, sections[1:], strict=True)
        )
        assert rebuilt == body[split_frontmatter(body)[1] :], path
        assert outline(body).count("\n") == len(found_)
        opening_paragraph(body)
    assert total > 1500


def test_corpus_known_documents(corpus_dir: Path) -> None:
    """Pinned against CommonMark's reference parser, which agreed on every corpus heading."""
    index = (corpus_dir / "index.md").read_text(encoding="utf-8")
    assert [h.anchor for h in headings(index)[:4]] == [
        "fastapi--fastapi-",
        "sponsors--sponsors-",
        "keystone-sponsor--keystone-sponsor-",
        "gold-sponsors--gold-sponsors-",
    ]
    people = (corpus_dir / "fastapi-people.md").read_text(encoding="utf-8")
    assert headings(people)[0].text == "FastAPI People"  # the include_yaml frontmatter is skipped
