"""Certificate trust per authority: system CAs, ``insecure``, or ssh-style pins in ``known_hosts``.

Mark servers often run with a self-signed certificate, so plain CA verification would push users to
``-insecure``. Pinning the certificate on first use (automatically on loopback, after a confirmation
elsewhere) keeps them protected against a later substitution instead. The decisions and the file
format are plain functions so they can be tested without a network.
"""

from __future__ import annotations

import enum
import ipaddress
import logging
import re
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from markproto import durable
from markproto.client.environment import home
from markproto.client.errors import CertificateChanged, KnownHostsError, Untrusted, UsageError
from markproto.protocol import digests, url
from markproto.protocol import errors as protocol_errors

HEADER = (
    "# Certificates pinned on first use by the mark client: 'host:port sha256:<hex>' per line.\n"
    "# Remove a line to forget a server's certificate; it is pinned again on the next contact.\n"
)
_LINE = re.compile(rf"(\S+)[ \t]+({digests.FINGERPRINT_PATTERN})")

log = logging.getLogger(__name__)


class Verification(enum.Enum):
    """Who vouches for the peer's certificate."""

    SYSTEM = "system"
    """Chain to the trusted CAs and hostname check, done by aioquic during the handshake."""
    INSECURE = "insecure"
    """No check at all."""
    PINNED = "pinned"
    """No check during the handshake; the peer's fingerprint must equal the pin afterwards."""


@dataclass(frozen=True, slots=True)
class Plan:
    """How to verify one authority's next handshake."""

    verification: Verification
    pin: str | None = None
    cafile: str | None = None
    capath: str | None = None


class FirstContact(enum.Enum):
    """What to do with an unpinned authority whose certificate failed verification."""

    AUTO_PIN = "auto-pin"
    ACCEPT_NEW = "accept-new"
    ASK = "ask"
    REFUSE = "refuse"


def first_contact_action(*, loopback: bool, trust_new: bool, can_ask: bool) -> FirstContact:
    """The decision table: loopback pins silently (the server is this machine), then ``trust_new``
    (ssh's accept-new), then an interactive confirmation, else refusal."""
    if loopback:
        return FirstContact.AUTO_PIN
    if trust_new:
        return FirstContact.ACCEPT_NEW
    return FirstContact.ASK if can_ask else FirstContact.REFUSE


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IP literals (bracketed or not, IPv4-mapped too)."""
    name = host.strip("[]").lower()
    if name == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(name)
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


def parse_known_hosts(text: str, source: str = "known_hosts") -> dict[str, str]:
    """Pins by authority. Blank lines and ``#`` comments are skipped; anything else malformed, or a
    second pin for one authority, raises: a guessed reading could silently drop a pin."""
    pins: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _LINE.fullmatch(line)
        if match is None or not _canonical_authority(match[1]):
            raise KnownHostsError(f"{source}:{number}: expected 'host:port sha256:<64 hex>'")
        if match[1] in pins:
            raise KnownHostsError(f"{source}:{number}: {match[1]} is pinned twice")
        pins[match[1]] = match[2]
    return pins


def _canonical_authority(text: str) -> bool:
    """``host:port`` exactly as a URL's authority is written (lowercase, port given)."""
    try:
        return url.format_authority(*url.parse_authority(text)) == text
    except protocol_errors.InvalidURL:
        return False


def format_known_hosts(pins: Mapping[str, str]) -> str:
    """A complete file: the header, then one line per pin in the given order."""
    return HEADER + "".join(f"{authority} {fp}\n" for authority, fp in pins.items())


def write_private(path: Path, text: str) -> None:
    """Replace ``path`` with mode 0600 in a 0700 folder, atomically and durably, so a crash
    leaves either the old file or the new one and other users never read it."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    durable.replace(str(path), text.encode(), mode=0o600)


def system_ca() -> tuple[str | None, str | None]:
    """The platform's CA file and directory; ``(None, None)`` lets aioquic fall back to certifi."""
    paths = ssl.get_default_verify_paths()
    return paths.cafile, paths.capath


class Trust:
    """The trust policy of one client. The known_hosts file is re-read on every decision, so a line
    removed by hand takes effect without a restart. ``confirm(authority, fingerprint)`` is called
    synchronously (a terminal prompt blocks on purpose); ``note`` receives one-line pin notices."""

    def __init__(
        self,
        *,
        insecure: bool = False,
        known_hosts: Path | None = None,
        trust_new: bool = False,
        confirm: Callable[[str, str], bool] | None = None,
        note: Callable[[str], None] | None = None,
        cafile: str | None = None,
    ) -> None:
        self.insecure = insecure
        self.known_hosts = (known_hosts or home() / "known_hosts").expanduser()
        self.trust_new = trust_new
        self.confirm = confirm
        self.note = note or log.info
        if cafile is not None and not Path(cafile).is_file():
            raise UsageError(f"{cafile}: no such CA file")
        self._ca = (cafile, None) if cafile is not None else system_ca()

    def pins(self) -> dict[str, str]:
        return parse_known_hosts(self._read() or "", str(self.known_hosts))

    def plan(self, authority: str) -> Plan:
        if self.insecure:
            return Plan(Verification.INSECURE)
        pin = self.pins().get(authority)
        if pin is not None:
            return Plan(Verification.PINNED, pin=pin)
        return Plan(Verification.SYSTEM, cafile=self._ca[0], capath=self._ca[1])

    def check(self, authority: str, plan: Plan, der: bytes) -> None:
        """After the handshake, before any request byte: a pinned peer must match its pin."""
        if plan.pin is None:
            return
        presented = digests.fingerprint(der)
        if presented != plan.pin:
            raise CertificateChanged(self._changed_message(authority, plan.pin, presented))

    def first_contact(self, authority: str, presented: str, reason: str) -> None:
        """Pin ``presented`` for an unpinned authority whose certificate failed verification with
        ``reason``, or raise ``Untrusted`` explaining the user's options."""
        host = url.parse_authority(authority)[0]
        action = first_contact_action(
            loopback=is_loopback(host), trust_new=self.trust_new, can_ask=self.confirm is not None
        )
        if action is FirstContact.ASK and self.confirm is not None:
            action = FirstContact.ACCEPT_NEW if self.confirm(authority, presented) else action
        if action in (FirstContact.ASK, FirstContact.REFUSE):
            raise Untrusted(
                f"{authority}: certificate not trusted ({reason}); it presents {presented}. "
                "Pin it on first use with -trust-new, or skip verification with -insecure"
            )
        self.pin(authority, presented)
        why = "loopback" if action is FirstContact.AUTO_PIN else "accepted"
        self.note(f"{authority}: pinned certificate {presented} in {self.known_hosts} ({why})")

    def pin(self, authority: str, presented: str) -> None:
        """Append one pin, keeping the file's other lines (and comments) as they are."""
        text = self._read()
        text = HEADER if text is None else text
        pins = parse_known_hosts(text, str(self.known_hosts))
        if authority in pins:
            if pins[authority] == presented:
                return
            raise CertificateChanged(self._changed_message(authority, pins[authority], presented))
        if text and not text.endswith("\n"):
            text += "\n"
        try:
            write_private(self.known_hosts, f"{text}{authority} {presented}\n")
        except OSError as exc:
            raise KnownHostsError(f"{self.known_hosts}: cannot write: {exc.strerror}") from exc

    def _read(self) -> str | None:
        try:
            return self.known_hosts.read_text()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise KnownHostsError(f"{self.known_hosts}: {exc.strerror}") from exc

    def _changed_message(self, authority: str, pinned: str, presented: str) -> str:
        line = _line_of(self.known_hosts, authority)
        where = f"line {line} of {self.known_hosts}" if line else f"its line in {self.known_hosts}"
        return (
            f"@@@ WARNING: THE CERTIFICATE OF {authority} HAS CHANGED @@@\n"
            "Someone may be intercepting the connection, or the server got a new certificate.\n"
            "No request was sent.\n"
            f"  pinned:    {pinned}\n"
            f"  presented: {presented}\n"
            f"If the change is expected, remove {where} and connect again."
        )


def _line_of(path: Path, authority: str) -> int | None:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    for number, line in enumerate(lines, 1):
        if line.split(maxsplit=1)[:1] == [authority]:
            return number
    return None
