"""protocol.links (docs/SPEC.md §5.9): which links a body holds and what a target means, case by
case and as properties (any input is read without an error, a link written anywhere outside
code is found once, targets resolve as the rules say), and the ``{#id}`` anchor rule."""

from __future__ import annotations

import re
import string
from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from markproto.protocol import bodies, linkkinds, links, mdoutline
from markproto.protocol.errors import MalformedResponse
from markproto.protocol.linkkinds import relations
from markproto.protocol.links import Target, extract, parse_target, resolve


def found(body: str) -> list[tuple[str, str, str]]:
    return [(link.target, link.label, link.syntax) for link in extract(body)]


# --- extraction -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "want"),
    [
        ("see [b](b.md)\n", [("b.md", "b", "inline")]),
        ('see [b](<a b.md> "title")\n', [("a b.md", "b", "inline")]),
        ("see [b](b.md 'title')\n", [("b.md", "b", "inline")]),
        ("[**bold** `code`](x.md)\n", [("x.md", "bold code", "inline")]),
        ("[![badge](ci.svg)](https://ci.org)\n", [("https://ci.org", "badge", "inline")]),
        ("![picture](p.png)\n", []),
        ("[a](f(1).md)\n", [("f(1).md", "a", "inline")]),
        ("[a]\\(b.md)\n", []),
        ("\\[a](b.md)\n", []),
        ("`[a](b.md)`\n", []),
        ("``x ` [a](b.md)``\n", []),
        (
            "[ref][r] and [r][] and [r]\n\n[R]: /r.md\n",
            [("/r.md", "ref", "reference")] + [("/r.md", "r", "reference")] * 2,
        ),
        ("[missing][nowhere]\n", []),
        (
            "[x] task, [ ], [^1], [y]\n\n[x]: /x.md\n[y]: /y.md\n",
            [("/y.md", "y", "reference")],
        ),
        ("<https://x.org/a>\n", [("https://x.org/a", "https://x.org/a", "autolink")]),
        ("<me@example.org>\n", []),
        ("go to https://x.org/a.\n", [("https://x.org/a", "https://x.org/a", "autolink")]),
        ("(see https://x.org/a)\n", [("https://x.org/a", "https://x.org/a", "autolink")]),
        ("see www.x.org\n", [("www.x.org", "www.x.org", "autolink")]),
        ("on mark://host/a.md\n", [("mark://host/a.md", "mark://host/a.md", "autolink")]),
        ('<img src="https://x.org/p.png">\n', []),
        ('<a href="/a.md" class="x">A <b>b</b></a>\n', [("/a.md", "A b", "html")]),
        ("[[Note]]\n", [("Note", "Note", "wikilink")]),
        ("[[Note#Part|the part]]\n", [("Note#Part", "the part", "wikilink")]),
        ("| [[Note\\|label]] |\n", [("Note", "label", "wikilink")]),
        ("![[Note]]\n", [("Note", "Note", "wikilink")]),
        ("![[diagram.png]]\n", []),
        ("```\n[a](b.md)\n```\n[c](d.md)\n", [("d.md", "c", "inline")]),
        ("~~~~ py\n[a](b.md)\n~~~\n[c](d.md)\n~~~~\n[e](f.md)\n", [("f.md", "e", "inline")]),
        ("text\n\n    [a](b.md)\n\n[c](d.md)\n", [("d.md", "c", "inline")]),
        ("- item\n\n    [a](b.md)\n", [("b.md", "a", "inline")]),
        ("<!-- [a](b.md)\n\n[c](d.md) -->\n[e](f.md)\n", [("f.md", "e", "inline")]),
        ("a <!-- [a](b.md) --> [e](f.md)\n", [("f.md", "e", "inline")]),
        ("[t]({{ url }}) [u](x/{% y %})\n", []),
        (
            "# [Head](h.md) { #h }\n\ntext [b](b.md)\n",
            [("h.md", "Head", "inline"), ("b.md", "b", "inline")],
        ),
        ("[multi\nline](m.md)\n", [("m.md", "multi line", "inline")]),
    ],
)
def test_what_is_a_link(body: str, want: list[tuple[str, str, str]]) -> None:
    assert found(body) == want


def test_links_know_their_line_and_section() -> None:
    body = (
        "---\ntitle: x\n---\nintro [a](a.md)\n\n# One\n\n[b](b.md)\n\n"
        "## Two\ntext\n[c][r]\n\n[r]: c.md\n"
    )
    assert [(link.line, link.section, link.target) for link in extract(body)] == [
        (4, "", "a.md"),
        (8, "one", "b.md"),
        (12, "two", "c.md"),
    ]
    assert extract(body.encode()) == extract(body)


def test_a_heading_line_holds_its_own_links() -> None:
    body = "# [Django](https://django.org) { #django }\n\nText.\n"
    (link,) = extract(body)
    assert (link.line, link.section, link.label) == (1, "django--django-", "Django")


def test_html_ids_are_collected() -> None:
    found = links.Extractor('<a name="top"></a>\n\n<div id="x">y</div>\n\n`<a id="no">`\n')
    for start, stop, section in mdoutline.iter_own_sections(found._body):
        found.section(start, stop, section)
    assert found.ids == ["top", "x"]


def test_a_document_keeps_at_most_links_max() -> None:
    body = "[a](a.md) " * (linkkinds.LINKS_MAX + 5)
    assert len(extract(body)) == linkkinds.LINKS_MAX


def test_relations_come_from_metadata() -> None:
    meta = {"rel-supersedes": "/a.md, /b.md", "rel-": "x", "tags": "t", "rel-see-also": "c.md"}
    assert list(relations(meta)) == [
        ("see-also", "c.md"),
        ("supersedes", "/a.md"),
        ("supersedes", "/b.md"),
    ]


_TEXT = st.text(alphabet=string.ascii_letters + string.digits + " ,.;", max_size=20)
_MARKUP = st.text(alphabet=string.printable + "é›\u2028", max_size=300)


@settings(max_examples=300, deadline=None)
@given(_MARKUP)
def test_any_body_reads_without_an_error(body: str) -> None:
    for link in extract(body):
        assert link.target and "\n" not in link.label and link.line >= 1
    extract(body.encode("utf-8", "surrogatepass"))


_REFERENCES = st.lists(
    st.sampled_from(
        [
            "[a]: /x.md",
            " [B  c]: <y.md> 'T'",
            "> [é]: /z.md",
            "-->[d]: /w.md",
            "<!-- c",
            "[a] [b c] [é][] [x][d] [É]",
            "```",
            "    [a]: /code.md",
            "- [a]: /item.md",
            "[lo\\]ng]: /v.md",
            "[lo\\]ng] [a\\]",
            "",
            "# [a]",
            "text",
        ]
    ),
    max_size=20,
).map("\n".join)


@settings(max_examples=300, deadline=None)
@given(st.one_of(_REFERENCES, _MARKUP), st.booleans())
def test_uses_no_definition_can_match_are_dropped_unseen(body: str, as_bytes: bool) -> None:
    """A reference use is kept only where its label may be defined (``_Labels``): the links
    are those found when every use is kept."""
    form: str | bytes = body.encode("utf-8", "surrogatepass") if as_bytes else body
    kept = extract(form)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(links._Labels, "__contains__", lambda self, label: True)
        assert extract(form) == kept


_SYNTAX = st.text(alphabet="ab `\\[]()<>!\n", max_size=60)


def test_the_spelled_out_spaces_are_what_the_patterns_call_spaces() -> None:
    every = "".join(map(chr, range(0x110000)))
    assert re.findall(f"[{links._SPACE}]", every) == re.findall(r"\s", every)
    assert re.findall(r"\s", every) == [c for c in every if c.isspace()]


@settings(max_examples=400, deadline=None)
@given(_SYNTAX)
def test_the_masking_shortcuts_equal_the_general_rules(text: str) -> None:
    """Single backticks pair in order and unnested brackets close at the next ``]``: the
    shortcuts for those give what the general code span and bracket rules give."""
    spans = links._code_spans(text) + [m.span() for m in links._ESCAPE.finditer(text)]
    masked = links._blanked(text, spans)
    assert links._masked(text) == masked
    stack: list[int] = []
    want: dict[int, int] = {}
    for at, char in enumerate(masked):
        if char == "[":
            stack.append(at)
        elif char == "]" and stack:
            want[stack.pop()] = at
    assert links._closing_brackets(masked) == want
    if links._NESTED.search(masked) is None:
        assert {at: masked.find("]", at) for at, c in enumerate(masked) if c == "["} == want
    closing = links._Closing(masked)
    for at, char in enumerate(masked):
        if char == "[":
            assert closing.get(at) == want.get(at)


@settings(max_examples=400, deadline=None)
@given(
    st.text(alphabet="ab :/.whtpw(*_~)\n<", max_size=60),
    st.lists(st.tuples(st.integers(0, 60), st.integers(1, 8)), max_size=5),
)
def test_bare_urls_are_read_around_the_links(text: str, spans: list[tuple[int, int]]) -> None:
    """Bare URLs are looked for in the gaps between the spans links and comments take, as in
    the text with those spans blanked."""
    taken = sorted((min(at, len(text)), min(at + size, len(text))) for at, size in spans)
    taken = [span for span in taken if span[0] < span[1]]
    rest = links._blanked(text, taken)
    want: list[linkkinds.Link] = []
    oracle = links.Extractor(text, want.append)
    for found in links._BARE.finditer(rest):
        at = found.start()
        if at and not (rest[at - 1].isspace() or rest[at - 1] in "*_~("):
            continue
        url = links._BARE_TRAIL.sub("", found.group())
        while url.endswith(")") and url.count(")") > url.count("("):
            url = url[:-1]
        if "://" in url or url[:4].lower() == "www.":
            oracle._add(at, "", url, url, linkkinds.AUTOLINK)
    got: list[linkkinds.Link] = []
    flat = array("I", [offset for span in taken for offset in span])
    links.Extractor(text, got.append)._bare(text, flat, lambda at: at, "")
    assert got == want


_LINKY = st.lists(
    st.sampled_from(
        [
            *("[a](b)", "[`c`](d)", "![i](j)", "[a](<b>)", "[a](b 't')", "[x][y]", "[y]: /z.md"),
            *("[[w]]", "[[v|u]](t)", "<a href='h'>k</a>", "<http://q>", "http://r.s", "www.t"),
            *("`", "``", "\\", "[", "]", "(", ")", "!", " ", "\n", "\n\n", "a", "\t", "é"),
            "\u2028",
        ]
    ),
    max_size=40,
).map("".join)


@settings(max_examples=500, deadline=None)
@given(st.one_of(_LINKY, _SYNTAX), st.booleans())
def test_a_whole_simple_link_reads_as_the_general_steps_read_it(body: str, as_bytes: bool) -> None:
    """``_SIMPLE_LINK``, one match for a plain ``[label](target)``, finds the links the
    bracket, label and destination steps find without it."""
    form: str | bytes = body.encode("utf-8", "surrogatepass") if as_bytes else body
    quick = extract(form)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(links, "_SIMPLE_LINK", re.compile(r"(?!)"))
        assert extract(form) == quick


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_TEXT, st.sampled_from(["a.md", "../b/c.md", "/d/", "#e"])), max_size=8))
def test_every_link_written_in_prose_is_found_once(pairs: list[tuple[str, str]]) -> None:
    body = "".join(f"{text} [label {i}]({target}) " for i, (text, target) in enumerate(pairs))
    assert [(link.label, link.target) for link in extract(body + "\n")] == [
        (f"label {i}", target) for i, (_, target) in enumerate(pairs)
    ]


# --- targets ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "syntax", "want"),
    [
        ("b.md", "inline", Target("/docs/b.md", ("/docs/b.md",))),
        ("../x/b.md#Part", "inline", Target("/x/b.md", ("/x/b.md",), "Part")),
        (
            "/docs/concepts/data_model/#metric-names",
            "inline",
            Target(
                "/docs/concepts/data_model",
                ("/docs/concepts/data_model.md", "/docs/concepts/data_model/index.md"),
                "metric-names",
            ),
        ),
        (
            "/docs/visualization/browser",
            "inline",
            Target(
                "/docs/visualization/browser",
                ("/docs/visualization/browser.md", "/docs/visualization/browser/index.md"),
            ),
        ),
        ("/", "inline", Target("/", ("/index.md",))),
        ("./", "inline", Target("/docs", ("/docs.md", "/docs/index.md"))),
        ("#top", "inline", Target("/docs/a.md", ("/docs/a.md",), "top")),
        ("a%20b.md?x=1#c%20d", "inline", Target("/docs/a b.md", ("/docs/a b.md",), "c d")),
        ("<sp ace.md>", "inline", Target("/docs/sp ace.md", ("/docs/sp ace.md",))),
        ("https://x.org/a#b", "inline", Target(url="https://x.org/a#b")),
        ("//cdn.org/x", "inline", Target(url="//cdn.org/x")),
        ("mailto:me@x.org", "inline", Target(url="mailto:me@x.org")),
        ("www.x.org", "autolink", Target(url="http://www.x.org")),
        (
            "mark://Host/n/x.md#s",
            "inline",
            Target("/n/x.md", ("/n/x.md",), "s", authority="host:6309"),
        ),
        (
            "Note",
            "wikilink",
            Target("/docs/Note.md", ("/docs/Note.md", "/Note.md"), name="Note.md"),
        ),
        (
            "sub/Note.md#Some Heading",
            "wikilink",
            Target(
                "/docs/sub/Note.md",
                ("/docs/sub/Note.md", "/sub/Note.md"),
                "Some Heading",
                name="sub/Note.md",
            ),
        ),
        (
            "Note#^block1",
            "wikilink",
            Target("/docs/Note.md", ("/docs/Note.md", "/Note.md"), name="Note.md"),
        ),
        ("#Heading", "wikilink", Target("/docs/a.md", ("/docs/a.md",), "Heading")),
    ],
)
def test_what_a_target_means(raw: str, syntax: str, want: Target) -> None:
    assert parse_target(raw, "/docs/a.md", syntax) == want
    assert links.offsite(raw, syntax) == (not want.internal)


def test_a_target_resolves_to_the_first_document_that_exists() -> None:
    target = parse_target("/docs/guide/", "/a.md", "inline")
    assert resolve(target, {"/docs/guide/index.md"}.__contains__, lambda name: ()) == (
        "/docs/guide/index.md"
    )
    both = {"/docs/guide.md", "/docs/guide/index.md"}
    assert resolve(target, both.__contains__, lambda name: ()) == "/docs/guide.md"
    assert resolve(target, set().__contains__, lambda name: ()) is None


def test_a_wikilink_falls_back_to_its_unique_file_name() -> None:
    named = {"note.md": ["/x/Note.md"], "dup.md": ["/a/dup.md", "/b/dup.md"]}
    lookup = lambda name: named.get(name, [])  # noqa: E731
    nothing = set().__contains__
    assert resolve(parse_target("Note", "/y/z.md", "wikilink"), nothing, lookup) == "/x/Note.md"
    assert resolve(parse_target("note", "/y/z.md", "wikilink"), nothing, lookup) == "/x/Note.md"
    assert resolve(parse_target("dup", "/y/z.md", "wikilink"), nothing, lookup) is None
    assert resolve(parse_target("b/dup", "/y/z.md", "wikilink"), nothing, lookup) == "/b/dup.md"
    assert resolve(parse_target("Note", "/y/z.md", "inline"), nothing, lookup) is None


_URLISH = st.tuples(
    st.sampled_from(["https://", "http://", "HTTP://", " http://", "<https://", "mark://", "www."]),
    st.text(max_size=20),
).map("".join)


@settings(max_examples=500, deadline=None)
@given(
    st.one_of(st.text(max_size=60), _URLISH),
    st.sampled_from(
        [linkkinds.INLINE, linkkinds.REFERENCE, linkkinds.AUTOLINK, linkkinds.HTML, linkkinds.WIKI]
    ),
)
def test_any_target_reads_as_a_clean_path_or_a_url(raw: str, syntax: str) -> None:
    target = parse_target(raw, "/docs/a.md", syntax)
    if target.internal:
        assert target.path.startswith("/") and ".." not in target.path.split("/")
        assert target.candidates and all(c.startswith("/") for c in target.candidates)
        assert not links.offsite(raw, syntax)
    else:
        assert not target.candidates
        assert links.offsite(raw, syntax) or "mark://" in raw.lower()  # a mark:// URL: maybe ours


# --- anchors ----------------------------------------------------------------------------------


def test_a_heading_attribute_id_is_an_anchor() -> None:
    body = "# Intro { #intro }\n\nx\n\n## Second Part {#part .wide}\n\ny\n"
    assert mdoutline.heading_id("Second Part {#part .wide}") == "part"
    assert mdoutline.heading_id("Plain {not an id}") == ""
    assert mdoutline.section(body, "part") == "## Second Part {#part .wide}\n\ny\n"
    assert mdoutline.section(body, "#PART") == "## Second Part {#part .wide}\n\ny\n"
    assert (
        mdoutline.section(
            body,
            "intro--intro-",
        )
        is not None
    )
    assert mdoutline.section(body, "nope") is None


def test_find_anchor_keeps_the_reference_rules_first() -> None:
    anchors, texts = ["x", "install"], ["Y { #install }", "Install"]
    assert mdoutline.find_anchor("install", anchors, texts) == 1


# --- the links body ---------------------------------------------------------------------------

_CELL = st.text(
    alphabet=string.printable.replace("\r", "").replace("\x0b", "").replace("\x0c", ""), max_size=12
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.builds(
            bodies.LinkRow,
            source=st.from_regex(r"/[a-z|#\\ ]{1,8}\.md", fullmatch=True),
            section=_CELL.map(lambda s: s.replace("\n", " ").strip()),
            line=st.integers(0, 10**6),
            target=st.from_regex(r"/[a-z#|]{1,8}", fullmatch=True),
            anchor=_CELL.map(lambda s: s.replace("\n", " ").strip()),
            raw=_CELL.map(lambda s: " ".join(s.split())),
            kind=st.sampled_from(bodies.LINK_KINDS),
            predicate=st.from_regex(r"[a-z-]{0,6}", fullmatch=True),
            state=st.sampled_from(bodies.LINK_STATES[:3]),
            label=_CELL.map(lambda s: " ".join(s.split())),
        ),
        max_size=5,
    ),
    st.lists(
        st.builds(
            bodies.LinkDocument,
            path=st.from_regex(r"/[a-z|]{1,8}\.md", fullmatch=True),
            title=_CELL.map(lambda s: " ".join(s.split())),
            depth=st.integers(0, 5),
        ),
        max_size=4,
    ),
)
def test_a_links_body_reads_back(
    rows: list[bodies.LinkRow], documents: list[bodies.LinkDocument]
) -> None:
    body = bodies.render_links("/docs/", rows, documents)
    assert bodies.parse_links(body) == (rows, documents)


def test_a_links_body_is_strict() -> None:
    body = bodies.render_links(
        "/a.md",
        [bodies.LinkRow("/a.md", "", 1, "/b.md", "", "b.md", "internal", "", "ok", "B")],
        [],
    )
    for broken in (
        body.replace(b"| 1 |", b"| x |"),
        body.replace(b"## Documents", b"## Docs"),
        b"\n# Other\n",
    ):
        with pytest.raises(MalformedResponse):
            bodies.parse_links(broken)


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="ab `\\[]()<>!:/.w-\"'\n", max_size=60))
def test_a_paragraph_reads_alike_with_its_final_newline(text: str) -> None:
    """A section of one paragraph is read in place, its final newline kept."""
    found: list[list[linkkinds.Link]] = [[], []]
    for form, out in zip((text, text + "\n"), found, strict=True):
        extractor = links.Extractor(form, out.append)
        extractor._block(form, 1, "")
        extractor.links()
    assert found[0] == found[1]
