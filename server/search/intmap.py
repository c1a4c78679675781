"""Tables of str -> ints where most keys hold one int: the body index's title and tag words
(``BodyIndex._holders``) and the link index's target keys (``LinkIndex._wants``, ``_named``).

A key holding one value keeps it as an int (28-32 bytes), one holding more an ``array`` (64
bytes of header and 8 a value): a vault of short notes gives most keys one document, and an
array each was about 80 bytes a key of it (a note's unique title words, its links' targets).
Values are added in ascending order, so each array is ascending (bisect reads it).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import TypeAlias

__all__ = ["IntMap", "add", "discard", "values"]

IntMap: TypeAlias = "dict[str, int | array[int]]"


def add(table: IntMap, key: str, value: int, typecode: str = "Q") -> None:
    """Append ``value`` to ``key``'s values (an array of ``typecode`` once there are two)."""
    found = table.get(key)
    if found is None:
        table[key] = value
    elif isinstance(found, int):
        table[key] = array(typecode, (found, value))
    else:
        found.append(value)


def discard(table: IntMap, key: str, value: int) -> None:
    """Take one ``value`` from ``key``'s values (none there: nothing changes); a key left
    with none is gone, one left with one holds an int again."""
    found = table.get(key)
    if found is None:
        return
    if isinstance(found, int):
        if found == value:
            del table[key]
        return
    try:
        found.remove(value)
    except ValueError:
        return
    if len(found) == 1:
        table[key] = found[0]


def values(table: IntMap, key: str) -> Sequence[int]:
    """``key``'s values in the order added (none: empty)."""
    found = table.get(key, ())
    return (found,) if isinstance(found, int) else found
