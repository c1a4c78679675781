"""A vault of short notes, the shape most Obsidian vaults have: what a document costs whatever
its size dominates there, where the corpora's 5-10 KB pages hide it. One definition, read by
the board bench (``bench_board``, part 1's notes row) and the per-note memory test
(``tests/server/search/test_build.py``)."""

from __future__ import annotations

__all__ = ["small_notes"]

_WORDS = ["note", "project", "meeting", "plan", "review", "design", "draft", "idea", "task"]
_FOLDERS = 8


def small_notes(count: int) -> list[tuple[str, bytes]]:
    """``count`` notes of about 540 bytes in a few folders: YAML frontmatter with two tags and
    an author, a title, two short paragraphs, a wikilink to the next note and a relative link
    to the previous one."""
    notes = []
    for i in range(count):
        words = " ".join(_WORDS[i * k % len(_WORDS)] + str(k % 5) for k in range(60))
        body = (
            f"---\ntags: [project, area{i % _FOLDERS}]\nauthor: sam\n---\n# Note {i}\n\n{words}"
            f"\n\n## Links\n\nSee [[note{(i + 1) % count}]] and [previous]"
            f"(../area{(i - 1) % _FOLDERS}/note{(i - 1) % count}.md).\n"
        )
        notes.append((f"/area{i % _FOLDERS}/note{i}.md", body.encode()))
    return notes
