"""``intmap``: a table of str -> ints that keeps a key's one value as an int holds, after any
adds and discards, what a dict of lists holds."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from markproto.server.search import intmap

KEYS = ["a", "b", "c"]
STEPS = st.lists(st.tuples(st.booleans(), st.sampled_from(KEYS), st.integers(0, 5)), max_size=40)


@settings(max_examples=300, deadline=None)
@given(STEPS)
def test_a_table_holds_what_a_dict_of_lists_holds(steps: list[tuple[bool, str, int]]) -> None:
    table: intmap.IntMap = {}
    model: dict[str, list[int]] = {}
    for adding, key, value in steps:
        if adding:
            intmap.add(table, key, value, "I")
            model.setdefault(key, []).append(value)
        else:
            intmap.discard(table, key, value)
            if value in model.get(key, []):
                model[key].remove(value)
                if not model[key]:
                    del model[key]
    assert sorted(table) == sorted(model)
    for key in KEYS:
        assert list(intmap.values(table, key)) == model.get(key, [])
        held = table.get(key)
        assert held is None or isinstance(held, int) == (len(model[key]) == 1)
