"""Control characters (SPEC §1.1), defined once: the ASCII C0 range U+0000-U+001F and DEL U+007F.

Those are the characters a request line cannot carry in its path (TAB excepted, as the reference
allows it), a ``mark://`` URL refuses, a stored token cannot hold, and a TOML basic string must
escape. C1 controls (U+0080-U+009F) are ordinary text to every one of those rules.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["CONTROL", "CONTROL_CLASS", "PATH_CONTROL_BYTES", "has_control"]

CONTROL: Final = frozenset([*map(chr, range(0x20)), "\x7f"])


def _class_body(chars: frozenset[str]) -> str:
    return "".join(f"\\x{ord(c):02x}" for c in sorted(chars))


CONTROL_CLASS: Final = _class_body(CONTROL)
"""``CONTROL`` as the body of a regular-expression character class."""
PATH_CONTROL_BYTES: Final = re.compile(("[" + _class_body(CONTROL - {"\t"}) + "]").encode())
"""A control byte other than TAB, for checking a raw request line before it is decoded."""

_CONTROL = re.compile(f"[{CONTROL_CLASS}]")
_CONTROL_BUT_TAB = re.compile(PATH_CONTROL_BYTES.pattern.decode())


def has_control(text: str, *, tab_ok: bool = False) -> bool:
    """Whether ``text`` holds a control character (TAB not counting when ``tab_ok``)."""
    return (_CONTROL_BUT_TAB if tab_ok else _CONTROL).search(text) is not None
