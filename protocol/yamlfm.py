"""Frontmatter YAML exactly as the reference's ``gopkg.in/yaml.v3`` (v3.0.1) writes and reads it.

``emit`` reproduces ``yaml.Marshal(map[string]string)`` byte for byte (SPEC §3.2): the natural key
order of yaml.v3's key sorter, and per scalar the first style the emitter allows of plain,
single-quoted and double-quoted, with its escapes, a 4-space indent and no line folding. Every
response's frontmatter is this output, so it decides every etag-free golden byte.

``load`` gives what ``yaml.Unmarshal`` into ``map[string]string`` gives (SPEC §2 step 6): scalars
keep their source text, plain nulls become ``""``, and collections, duplicate keys or syntax
errors are refused. A fast path reads the common ``key: value`` block without a YAML parser and
must agree with the full path on everything it accepts.

Deliberate deviations, all outside the metadata grammar (values carry no CR or LF):
  * a scalar containing LF is double-quoted (``"a\\nb"``) where yaml.v3 writes a literal block;
  * an explicit tag other than ``!!str``, and the merge key ``<<``, are refused on load, where
    yaml.v3 would resolve or merge them.
Note ``<<`` as a *value* is written plain: yaml.v3 v3.0.1 never looks ``<`` up in its resolver
table, so it resolves ``<<`` to a string.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from functools import cache, cmp_to_key, lru_cache
from typing import TYPE_CHECKING

from markproto.protocol.errors import MalformedRequest

if TYPE_CHECKING:
    import yaml

_KEY_CACHE = 256
"""Entries of the caches keyed by metadata keys (their order, their written prefix): a vault has
few distinct keys, and one document's keys are at most ``limits.MAX_META_BYTES`` (1 KiB, 50
keys), so each cache holds at most about half a MiB: keys, tuples and what they map to."""

# --- key order (yaml.v3 sorter.go) ------------------------------------------------------------

_PLAIN_ORDER_KEY = re.compile(r"[a-z-]*")
"""Keys of only lowercase letters and ``-`` sort in byte order under the natural order too."""


def _is_digit(c: str) -> bool:
    """Go ``unicode.IsDigit`` (category Nd)."""
    return c.isdecimal()


def _digit_run(s: str, i: int, n: int) -> tuple[int, int]:
    """Read the digit run at ``s[i:]`` onto ``n`` the way Go does, int64 wrap-around included."""
    while i < len(s) and _is_digit(s[i]):
        n = n * 10 + ord(s[i]) - 48
        i += 1
    n &= (1 << 64) - 1
    return (n - (1 << 64) if n >= 1 << 63 else n), i


def key_less(a: str, b: str) -> bool:
    """yaml.v3's ``keyList.Less`` for two string keys."""
    digits = False
    for i in range(min(len(a), len(b))):
        ca, cb = a[i], b[i]
        if ca == cb:
            digits = _is_digit(ca)
            continue
        al, bl = ca.isalpha(), cb.isalpha()
        if al and bl:
            return ca < cb
        if al or bl:
            return al if digits else bl
        start = 0
        if ca == "0" or cb == "0":
            j = i - 1
            while j >= 0 and _is_digit(a[j]):
                if a[j] != "0":
                    start = 1
                    break
                j -= 1
        an, ai = _digit_run(a, i, start)
        bn, bi = _digit_run(b, i, start)
        if an != bn:
            return an < bn
        if ai != bi:
            return ai < bi
        return ca < cb
    return len(a) < len(b)


def _compare(a: str, b: str) -> int:
    return -1 if key_less(a, b) else 1 if key_less(b, a) else 0


@lru_cache(maxsize=_KEY_CACHE)
def _order(keys: tuple[str, ...]) -> tuple[str, ...]:
    if all(_PLAIN_ORDER_KEY.fullmatch(k) for k in keys):
        return tuple(sorted(keys))
    return tuple(sorted(keys, key=cmp_to_key(_compare)))


# --- scalar resolution (yaml.v3 resolve.go, encode.go stringv) -------------------------------

_NON_STRINGS = frozenset(
    {"true", "True", "TRUE", "false", "False", "FALSE", "", "~", "null", "Null", "NULL"}
    | {".nan", ".NaN", ".NAN", ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"}
    | {"-.inf", "-.Inf", "-.INF"}
)
"""Plain scalars yaml.v3 looks up as bool, null or special floats (``<<`` is never looked up)."""
_OLD_BOOLS = frozenset(
    {"y", "Y", "yes", "Yes", "YES", "on", "On", "ON"}
    | {"n", "N", "no", "No", "NO", "off", "Off", "OFF"}
)
"""YAML 1.1 booleans: strings to yaml.v3, quoted on output anyway for YAML 1.1 readers."""
_YAML_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")
_GO_DOT_FLOAT = re.compile(r"\.[0-9]+(?:_[0-9]+)*(?:[eE][-+]?[0-9]+(?:_[0-9]+)*)?")
"""Go ``strconv.ParseFloat`` syntax for text starting with ``.`` (underscores between digits)."""
_BASE60 = re.compile(r"[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?")
_STAMP_T = re.compile(
    r"([0-9]{4})-([0-9]{1,2})-([0-9]{1,2})[Tt]([0-9]{1,2}):([0-9]{1,2}):([0-9]{1,2})"
    r"(?:[.,][0-9]+)?(?:Z|[-+]([0-9]{2}):([0-9]{2}))"
)
_STAMP_SPACE = re.compile(
    r"([0-9]{4})-([0-9]{1,2})-([0-9]{1,2}) +([0-9]{1,2}):([0-9]{1,2}):([0-9]{1,2})(?:[.,][0-9]+)?"
)
_DATE = re.compile(r"([0-9]{4})-([0-9]{1,2})-([0-9]{1,2})")
_UINT64_MAX = (1 << 64) - 1


def _go_parse_uint(s: str, base: int) -> int | None:
    """Go ``strconv.ParseUint(s, base, 64)`` without underscores; base 0 reads the prefix."""
    if not s:
        return None
    if base == 0:
        base = 10
        if s[0] == "0":
            prefix = s[1:2].lower()
            if len(s) >= 3 and prefix in ("b", "o", "x"):
                base, s = {"b": 2, "o": 8, "x": 16}[prefix], s[2:]
            else:
                base, s = 8, s[1:]
                if not s:
                    return 0
    if not (s.isascii() and s.isalnum()):
        return None
    try:
        n = int(s, base)
    except ValueError:
        return None
    return n if n <= _UINT64_MAX else None


def _go_parse_int(s: str, base: int) -> int | None:
    """Go ``strconv.ParseInt(s, base, 64)``: an optional sign, then ``ParseUint``, int64 range."""
    negative = s[:1] == "-"
    n = _go_parse_uint(s[1:] if s[:1] in ("+", "-") else s, base)
    if n is None or n > (1 << 63) - (0 if negative else 1):
        return None
    return n


def _days_in(month: int, year: int) -> int:
    if month == 2:
        return 29 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 28
    return 30 if month in (4, 6, 9, 11) else 31


def _is_timestamp(s: str) -> bool:
    """yaml.v3 ``parseTimestamp``: Go ``time.Parse`` with its four layouts and range checks."""
    for pattern in (_STAMP_T, _STAMP_SPACE, _DATE):
        m = pattern.fullmatch(s)
        if m is None:
            continue
        year, month, day = int(m[1]), int(m[2]), int(m[3])
        if not 1 <= month <= 12 or not 1 <= day <= _days_in(month, year):
            return False
        if pattern is _DATE:
            return True
        if int(m[4]) > 23 or int(m[5]) > 59 or int(m[6]) > 59:
            return False
        return pattern is _STAMP_SPACE or m[7] is None or (int(m[7]) <= 24 and int(m[8]) <= 60)
    return False


def _finite_float(s: str) -> bool:
    return math.isfinite(float(s))


def _resolves_to_string(s: str) -> bool:
    """True when yaml.v3 would read ``s`` written plain back as a string (``resolve("", s)``)."""
    if s in _NON_STRINGS:
        return False
    first = s[0]
    if first == ".":
        return not (_GO_DOT_FLOAT.fullmatch(s) and _finite_float(s.replace("_", "")))
    if first not in "+-0123456789":
        return True
    if first.isdigit() and s[4:5] == "-" and s[:4].isdigit() and _is_timestamp(s):
        return False
    plain = s.replace("_", "")
    if _go_parse_int(plain, 0) is not None or _go_parse_uint(plain, 0) is not None:
        return False
    if _YAML_FLOAT.fullmatch(plain) and _finite_float(plain):
        return False
    for prefix, base in (("0b", 2), ("0o", 8)):
        if plain.startswith(prefix):
            rest = plain[2:]
            return _go_parse_int(rest, base) is None and _go_parse_uint(rest, base) is None
        if plain.startswith("-" + prefix):
            return _go_parse_int("-" + plain[3:], base) is None
    return True


# --- scalar style (yaml.v3 emitterc.go) -------------------------------------------------------

_BREAKS = "\r\n\x85\u2028\u2029"


@cache
def _non_printable() -> re.Pattern[str]:
    """The complement of yaml.v3's ``is_printable``: astral characters and the BOM count as
    non-printable, so they force double quotes. Compiled on first use, as is
    ``_double_escaped``: a class over most of the BMP takes ~9 ms to compile, which every
    process that never quotes a scalar (a ``mark fetch``) would pay at import."""
    return re.compile(r"[^\n\x20-\x7e\xa0-\ud7ff\ue000-\ufefe\uff00-\ufffd]")


@cache
def _double_escaped() -> re.Pattern[str]:
    """The characters a double-quoted scalar writes as escapes."""
    return re.compile(
        r"[^\x20\x21\x23-\x5b\x5d-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd]"
    )


_SHORT_ESCAPES = {
    "\0": "\\0",
    "\a": "\\a",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\v": "\\v",
    "\f": "\\f",
    "\r": "\\r",
    "\x1b": "\\e",
    '"': '\\"',
    "\\": "\\\\",
    "\x85": "\\N",
    "\u2028": "\\L",
    "\u2029": "\\P",
}
_SAFE_PLAIN = re.compile(r"[A-Za-z0-9_/+=][A-Za-z0-9_./+=,@-]*")
"""Text the emitter analysis always allows plain (no indicator, blank, break or colon): only
the resolver decides. Etags, hashes, cursors, versions and most words are this."""
_SIMPLE_KEY_MAX = 128
"""yaml.v3 v3.0.1 writes a key longer than this many bytes as an explicit ``? key`` entry."""
_INDENT = "    "
"""The indentation yaml.v3 gives continuation lines of a scalar in a top-level mapping."""
_SEPARATOR_RUN = re.compile("([\u2028\u2029]+)(?=.)", re.DOTALL)
"""Line breaks a single-quoted scalar may hold (LF is never single-quoted here; CR and NEL are
not printable, so they force double quotes)."""


def _escape_char(m: re.Match[str]) -> str:
    c = m[0]
    short = _SHORT_ESCAPES.get(c)
    if short is not None:
        return short
    code = ord(c)
    if code <= 0xFF:
        return f"\\x{code:02X}"
    return f"\\u{code:04X}" if code <= 0xFFFF else f"\\U{code:08X}"


def _double_quoted(s: str) -> str:
    return '"' + _double_escaped().sub(_escape_char, s) + '"'


def _single_quoted(s: str) -> str:
    text = s.replace("'", "''")
    if "\u2028" in text or "\u2029" in text:
        text = _SEPARATOR_RUN.sub(r"\1" + _INDENT, text)
    return "'" + text + "'"


def _plain_and_single_allowed(s: str) -> tuple[bool, bool]:
    """yaml.v3 ``yaml_emitter_analyze_scalar`` for block context: (plain, single-quoted)."""
    indicators = s.startswith(("---", "..."))
    breaks = special = tabs = break_space = space_break = False
    previous_space = previous_break = False
    preceded_by_blank = True
    last = len(s) - 1
    for i, c in enumerate(s):
        followed_by_blank = i == last or s[i + 1] in " \t"
        if i == 0:
            if c in "#,[]{}&*!|>'\"%@`":
                indicators = True
            elif c in "?:-":
                indicators = indicators or followed_by_blank
        elif (c == ":" and followed_by_blank) or (c == "#" and preceded_by_blank):
            indicators = True
        if c == "\t":
            tabs = True
        elif _non_printable().match(c):
            special = True
        if c == " ":
            break_space = break_space or previous_break
            previous_space, previous_break = True, False
        elif c in _BREAKS:
            breaks = True
            space_break = space_break or previous_space
            previous_space, previous_break = False, True
        else:
            previous_space = previous_break = False
        preceded_by_blank = c in " \t\0" or c in _BREAKS
    single = not (break_space or space_break or tabs or special)
    edges = s[0] == " " or s[-1] == " " or s[0] in _BREAKS or s[-1] in _BREAKS
    plain = single and not (indicators or breaks or edges)
    return plain, single


def scalar(s: str) -> str:
    """One string as yaml.v3 writes it in a block mapping (key or value). Not cached: values
    are mostly unique (every response's etag and times), so a cache would only keep them."""
    if _SAFE_PLAIN.fullmatch(s):
        return s if _resolves_to_string(s) and s not in _OLD_BOOLS else _double_quoted(s)
    if "\n" in s or not _resolves_to_string(s) or _BASE60.fullmatch(s) or s in _OLD_BOOLS:
        return _double_quoted(s)
    plain, single = _plain_and_single_allowed(s)
    if plain:
        return s
    return _single_quoted(s) if single else _double_quoted(s)


@lru_cache(maxsize=_KEY_CACHE)
def _key_prefix(key: str) -> str:
    if len(key.encode("utf-8", "surrogatepass")) > _SIMPLE_KEY_MAX or any(
        c in _BREAKS for c in key
    ):
        return f"? {scalar(key)}\n: "
    return f"{scalar(key)}: "


def emit(meta: Mapping[str, str]) -> str:
    """``key: value`` lines as ``yaml.Marshal`` writes the map (``""`` for an empty map: the
    reference never marshals one, it omits the block)."""
    return "".join([f"{_key_prefix(key)}{scalar(meta[key])}\n" for key in _order(tuple(meta))])


# --- load (yaml.v3 Unmarshal into map[string]string) ------------------------------------------

_PLAIN_NULLS = frozenset({"", "~", "null", "Null", "NULL"})
_STR_TAG = "tag:yaml.org,2002:str"
_UNTAGGED_PLAIN = "!untagged-plain"
MERGE_KEY = "<<"
MERGE_KEY_REFUSED = "merge keys are not supported in metadata"
"""A request key ``<<`` is written plain, which YAML reads as a merge: refused both ways."""
_FAST_LINE = re.compile(
    r"([a-z0-9][a-z0-9-]*):"
    r"(?: ([A-Za-z0-9_./+=](?:[A-Za-z0-9_./+=,@-]| (?=[^ ])|:(?=[^ ]))*)"
    r'| "([^"\\\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff\ufeff\ufffe\uffff]*)")?'
)
"""One ``key: value`` line whose value is a plain scalar of safe characters, or a double-quoted
one without escapes: what the reference client and this project send."""


@cache
def _loader() -> type[yaml.BaseLoader]:
    """The full path's loader, built on first use: PyYAML costs tens of milliseconds to import,
    which a client that only ever meets the fast path (``mark fetch``) should not pay.

    It composes nodes only, marking untagged plain scalars so plain nulls can be told apart from
    quoted and explicitly tagged ones (PyYAML's base resolver tags them all ``str``)."""
    import yaml

    base: type[yaml.BaseLoader] = getattr(yaml, "CBaseLoader", yaml.BaseLoader)

    class Loader(base):  # type: ignore[valid-type,misc]
        def resolve(self, kind: type[yaml.Node], value: str, implicit: tuple[bool, bool]) -> str:
            if kind is yaml.ScalarNode and implicit[0]:
                return _UNTAGGED_PLAIN
            return str(super().resolve(kind, value, implicit))

    return Loader


def load(block: str | bytes) -> dict[str, str]:
    """The metadata map of a frontmatter block; ``MalformedRequest`` where yaml.v3 would fail."""
    if isinstance(block, bytes):
        try:
            block = block.decode()
        except UnicodeDecodeError as exc:
            raise MalformedRequest("metadata is not valid UTF-8") from exc
    fast = _load_fast(block)
    return fast if fast is not None else _load_full(block)


def _load_fast(block: str) -> dict[str, str] | None:
    meta: dict[str, str] = {}
    for line in block.split("\n"):
        if not line:
            continue
        m = _FAST_LINE.fullmatch(line)
        if m is None or m[1] == "null":
            return None
        key, plain, quoted = m.groups()
        if key in meta:
            raise MalformedRequest(f"mapping key {key!r} already defined")
        meta[key] = quoted if quoted is not None else "" if plain in _PLAIN_NULLS else plain or ""
    return meta


def _load_full(block: str) -> dict[str, str]:
    import yaml

    loader = _loader()(block)
    try:
        root = loader.get_node() if loader.check_node() else None
    except yaml.YAMLError as exc:
        raise MalformedRequest(f"metadata is not valid YAML: {exc}") from exc
    finally:
        loader.dispose()
    if root is None or _is_null(root):
        return {}
    if not isinstance(root, yaml.MappingNode):
        raise MalformedRequest("metadata is not a mapping")
    pairs: list[tuple[yaml.Node, yaml.Node]] = root.value
    seen: set[tuple[type[yaml.Node], object]] = set()
    for key, _ in pairs:
        ident = (type(key), key.value if isinstance(key, yaml.ScalarNode) else id(key))
        if ident in seen:
            raise MalformedRequest(f"mapping key {key.value!r} already defined")
        seen.add(ident)
    meta: dict[str, str] = {}
    for key, value in pairs:
        if key.tag == _UNTAGGED_PLAIN and key.value == MERGE_KEY:
            raise MalformedRequest(MERGE_KEY_REFUSED)
        if not _is_null(key):
            meta[_text(key)] = "" if _is_null(value) else _text(value)
    return meta


def _is_null(node: yaml.Node) -> bool:
    return node.tag == _UNTAGGED_PLAIN and node.value in _PLAIN_NULLS


def _text(node: yaml.Node) -> str:
    import yaml

    if not isinstance(node, yaml.ScalarNode):
        raise MalformedRequest("metadata values must be strings")
    if node.tag not in (_UNTAGGED_PLAIN, _STR_TAG):
        raise MalformedRequest(f"metadata tag {node.tag} is not supported")
    return str(node.value)
