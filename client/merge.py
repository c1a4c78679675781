"""Three-way merge of a document and of its metadata: pure functions, no I/O.

A writer started from version N (the base) and wrote ``ours``; meanwhile the server moved on to
``theirs``. Lines that neither side changed stay; a region only one side changed takes that
side's text; a region both sides changed identically takes it once; a region both changed
differently is an overlap, written with git's markers (``<<<<<<<``, ``=======``, ``>>>>>>>``)
so a person or an agent can resolve it. Both faces (``mark publish -on-conflict merge`` and the
MCP bridge's ``on_conflict: merge``) call ``merge_text`` and ``merge_meta`` here, through
``client.publishing``.

The line alignment is difflib's (longest matching blocks), diff3-style: a line of the base is a
stable anchor when both sides kept it, and what lies between two anchors is one region. difflib's
junk heuristic (lines in over 1% of a long document, such as blank lines and fences, only extend
matches) keeps a 1 MB merge to seconds; at worst a coarser alignment turns what could have merged
into an overlap, never into a wrong clean merge, since a region is taken from one side only when
the other left it exactly as the base had it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher

OURS_MARKER = "<<<<<<<"
SPLIT_MARKER = "======="
THEIRS_MARKER = ">>>>>>>"


@dataclass(frozen=True, slots=True)
class Merged:
    """The merged text and how many regions overlap (0: clean, no markers in ``text``)."""

    text: str
    conflicts: int


@dataclass(frozen=True, slots=True)
class MergedMeta:
    """Merged metadata; ``clashes`` are keys both sides set differently (ours is kept)."""

    meta: dict[str, str]
    clashes: tuple[str, ...]


def merge_text(
    base: str, ours: str, theirs: str, *, ours_label: str = "yours", theirs_label: str = "theirs"
) -> Merged:
    """Merge ``ours`` and ``theirs``, both edits of ``base``, line by line."""
    b, o, t = (_lines(text) for text in (base, ours, theirs))
    to_ours, to_theirs = _matches(b, o), _matches(b, t)
    anchors = [line for line in range(len(b)) if line in to_ours and line in to_theirs]
    out: list[str] = []
    conflicts = 0
    i = j = k = 0  # the next unmerged line of base, ours and theirs
    for anchor in [*anchors, None]:
        if anchor is None:
            end_b, end_o, end_t = len(b), len(o), len(t)
        else:
            end_b, end_o, end_t = anchor, to_ours[anchor], to_theirs[anchor]
        region = _resolve(b[i:end_b], o[j:end_o], t[k:end_t])
        if region is None:
            conflicts += 1
            out += _conflict(o[j:end_o], t[k:end_t], ours_label, theirs_label)
        else:
            out += region
        if anchor is None:
            break
        out.append(b[anchor])
        i, j, k = anchor + 1, end_o + 1, end_t + 1
    return Merged("".join(out), conflicts)


def merge_meta(
    base: Mapping[str, str], ours: Mapping[str, str], theirs: Mapping[str, str]
) -> MergedMeta:
    """Key by key, the same rule as lines: a key one side changed (or removed) takes that
    side's value; a key both changed differently is a clash, and ours wins it."""
    merged: dict[str, str] = {}
    clashes = []
    for key in sorted({*base, *ours, *theirs}):
        was, mine, other = base.get(key), ours.get(key), theirs.get(key)
        if mine == other or other == was:
            value = mine
        elif mine == was:
            value = other
        else:
            value = mine
            clashes.append(key)
        if value is not None:
            merged[key] = value
    return MergedMeta(merged, tuple(clashes))


def _lines(text: str) -> list[str]:
    """The text's lines, each with its ``\n`` (the last may have none)."""
    lines = text.split("\n")
    return [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])


def _matches(a: Sequence[str], b: Sequence[str]) -> dict[int, int]:
    """Line ``i`` of ``a`` -> the line of ``b`` it is aligned with, for every matched line."""
    blocks = SequenceMatcher(None, a, b).get_matching_blocks()
    return {block.a + n: block.b + n for block in blocks for n in range(block.size)}


def _resolve(base: list[str], ours: list[str], theirs: list[str]) -> list[str] | None:
    """One region between anchors: the side that changed it, or None when both did, apart."""
    if ours == theirs or theirs == base:
        return ours
    if ours == base:
        return theirs
    return None


def _conflict(ours: list[str], theirs: list[str], ours_label: str, theirs_label: str) -> list[str]:
    return [
        f"{OURS_MARKER} {ours_label}\n",
        *_closed(ours),
        f"{SPLIT_MARKER}\n",
        *_closed(theirs),
        f"{THEIRS_MARKER} {theirs_label}\n",
    ]


def _closed(lines: list[str]) -> list[str]:
    """The lines, the last one ending in a newline so the marker after it starts a line."""
    if lines and not lines[-1].endswith("\n"):
        return [*lines[:-1], lines[-1] + "\n"]
    return lines
