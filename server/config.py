"""Server settings from four sources: defaults < TOML config file < ``MARK_*`` environment < flags.

Every value is parsed and checked here, once, so a bad setting stops the server at startup with a
message naming the setting and where it came from (``MARK_PORT: not a port number: 'abc'``)
instead of surfacing later as an odd failure. Unknown config-file keys are errors too: a typo must
not silently leave a default (say, an open write gate) in place.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

import click

from markproto.protocol.limits import DEFAULT_PORT

TOKENS_NAME = "tokens.toml"
MIN_MEMORY_BUDGET = 64 << 20
APP_DIR = "markproto"
LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("debug", "info", "warn", "warning", "error")


class ConfigError(Exception):
    """A setting that cannot be used; the message names the setting and its source."""


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """Every server setting, validated. ``sources`` maps each non-default setting to its origin."""

    root: Path
    state_dir: Path
    host: str = "::"
    port: int = DEFAULT_PORT
    tokens: Path | None = None
    """The tokens file; ``None`` only when built by hand (``load_config`` always resolves one)."""
    read_only: bool = False
    rate_limit: float = 50.0
    rate_burst: int = 100
    tls_cert: Path | None = None
    tls_key: Path | None = None
    max_streams: int = 32
    request_timeout: float = 10.0
    """Seconds a request may take; 0 means no limit."""
    idle_timeout: float = 30.0
    log_format: str = "text"
    log_level: str = "info"
    scan_interval: float = 30.0
    """Seconds between periodic store change scans; 0 disables them."""
    index_workers: int = 2
    """Processes that analyze bodies for the body index at startup when there is much to
    analyze (no saved index; capped by the CPU count); each costs ~30 MiB while it runs, so a
    small board trades that time for memory. 0: on a thread of the server."""
    memory_budget: int | None = None
    """Bytes the server is sized for (``memory.Shares``: every cache's bound); None: the
    cgroup's memory limit, else 384 MiB."""
    watch_limit: int = 4096
    """WATCH subscriptions open at once in all; 0 turns WATCH off (answered as unsupported)."""
    watch_connection_limit: int = 16
    """WATCH subscriptions open at once on one connection (each holds one of its streams)."""
    watch_heartbeat: float = 20.0
    """Seconds of silence on a WATCH stream before a heartbeat."""
    watch_log: int = 4096
    """Changes kept for WATCH subscribers to resume from."""
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)


def is_default_root(config: ServerConfig) -> bool:
    """True when nobody chose the content root: the app may create and seed it on first run."""
    return "root" not in config.sources


def tokens_explicit(config: ServerConfig) -> bool:
    """True when the tokens file was configured, so its absence at startup is an error."""
    return "tokens" in config.sources


# ---------------------------------------------------------------------------------------------
# Value parsers: each takes a raw value (a string from the environment or a flag, or a native TOML
# value) and returns the typed setting, or raises ValueError with the reason.

N = TypeVar("N", int, float)
F = TypeVar("F", bound=Callable[..., Any])

_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h|d|w)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_duration(text: str) -> float:
    """Seconds in a duration such as ``90d``, ``1h30m``, ``500ms`` (units ms s m h d w)."""
    stripped = text.strip()
    if not stripped or _DURATION.sub("", stripped):
        raise ValueError(f"not a duration (like 10s, 1h30m, 90d): {text!r}")
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in _DURATION.findall(stripped))


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"must be a string, not {value!r}")
    return value


def _path(value: object) -> Path:
    if isinstance(value, Path):
        return value
    text = _text(value)
    if not text.strip():
        raise ValueError("must not be empty")
    return Path(text).expanduser()


def _bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = _text(value).strip().lower()
    if text in ("1", "true", "yes"):
        return True
    if text in ("0", "false", "no"):
        return False
    raise ValueError(f"not a boolean (1/true/yes or 0/false/no): {value!r}")


def _int(value: object, what: str = "an integer") -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise ValueError(f"not {what}: {value!r}")


def _number(value: object) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            raise ValueError(f"not a number: {value!r}") from None
    else:
        raise ValueError(f"not a number: {value!r}")
    if not math.isfinite(number):
        raise ValueError(f"must be finite: {value!r}")
    return number


def _seconds(value: object) -> float:
    """Bare numbers are seconds; strings may also carry units (``10s``, ``500ms``, ``2m``)."""
    try:
        return _number(value)
    except ValueError:
        if isinstance(value, str):
            return parse_duration(value)
        raise


def _at_least(
    parse: Callable[[object], N], low: float, *, above: bool = False
) -> Callable[[object], N]:
    def check(value: object) -> N:
        result = parse(value)
        if above and not result > low:
            raise ValueError(f"must be > {low:g}")
        if not result >= low:
            raise ValueError(f"must be >= {low:g}")
        return result

    return check


_SIZE = re.compile(r"(\d+)\s*([KMGT]?)(?:i?B)?", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(value: object) -> int:
    """Bytes in a size such as ``384M``, ``1G``, ``524288K`` or ``268435456`` (units are powers
    of 1024, as systemd's ``MemoryMax`` reads them)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    found = _SIZE.fullmatch(_text(value).strip())
    if found is None:
        raise ValueError(f"not a size (like 384M or 1G): {value!r}")
    return int(found.group(1)) * _SIZE_UNITS[found.group(2).upper()]


def _at_least_size(size: int, value: object) -> int:
    if size < MIN_MEMORY_BUDGET:
        raise ValueError(f"must be at least {MIN_MEMORY_BUDGET >> 20}M: {value!r}")
    return size


def _port(value: object) -> int:
    number = _int(value, "a port number")
    if not 0 <= number <= 65535:
        raise ValueError(f"not a port number: {value!r}")
    return number


def _host(value: object) -> str:
    text = _text(value).strip()
    if not text or any(c.isspace() for c in text):
        raise ValueError(f"not a host or address: {value!r}")
    return text


def _choice(options: tuple[str, ...]) -> Callable[[object], str]:
    def check(value: object) -> str:
        text = _text(value).strip().lower()
        if text not in options:
            raise ValueError(f"must be one of {', '.join(options)}: {value!r}")
        return text

    return check


@dataclass(frozen=True, slots=True)
class _Setting:
    parse: Callable[[object], Any]
    help: str
    metavar: str = "N"

    @property
    def is_path(self) -> bool:
        return self.metavar in ("DIR", "FILE")


_SETTINGS: dict[str, _Setting] = {
    "root": _Setting(_path, "Content root; by default one in the user's data directory.", "DIR"),
    "state_dir": _Setting(_path, "State directory (development certificate, tokens).", "DIR"),
    "host": _Setting(_host, "Address to listen on; '::' is dual-stack.", "HOST"),
    "port": _Setting(_port, "UDP port; 0 picks a free one."),
    "tokens": _Setting(_path, "Tokens file; by default <state dir>/tokens.toml.", "FILE"),
    "read_only": _Setting(_bool, "Refuse every write."),
    "rate_limit": _Setting(_at_least(_number, 0), "Requests per second per client IP; 0: off."),
    "rate_burst": _Setting(_at_least(_int, 1), "Largest burst of requests per client IP."),
    "tls_cert": _Setting(_path, "TLS certificate (PEM), with --tls-key.", "FILE"),
    "tls_key": _Setting(_path, "TLS private key (PEM), with --tls-cert.", "FILE"),
    "max_streams": _Setting(_at_least(_int, 1), "Concurrent request streams per connection."),
    "request_timeout": _Setting(_at_least(_seconds, 0), "Time per request; 0: none.", "SECONDS"),
    "idle_timeout": _Setting(
        _at_least(_seconds, 0, above=True), "Time before an idle connection closes.", "SECONDS"
    ),
    "log_format": _Setting(_choice(LOG_FORMATS), "Log format: text or json.", "FORMAT"),
    "log_level": _Setting(_choice(LOG_LEVELS), "debug, info, warn or error.", "LEVEL"),
    "scan_interval": _Setting(
        _at_least(_seconds, 0), "Time between store change scans; 0: none.", "SECONDS"
    ),
    "index_workers": _Setting(
        _at_least(_int, 0), "Indexing processes past 64 MiB of bodies (~50 MiB each); 0: none."
    ),
    "memory_budget": _Setting(
        lambda value: _at_least_size(parse_size(value), value),
        "Memory the server is sized for (cache bounds); default: the cgroup limit, else 384M.",
        "SIZE",
    ),
    "watch_limit": _Setting(_at_least(_int, 0), "WATCH subscriptions in all; 0: WATCH off."),
    "watch_connection_limit": _Setting(_at_least(_int, 1), "WATCH subscriptions per connection."),
    "watch_heartbeat": _Setting(
        _at_least(_seconds, 0, above=True),
        "Silence on a WATCH stream before a heartbeat.",
        "SECONDS",
    ),
    "watch_log": _Setting(_at_least(_int, 1), "Changes kept for WATCH subscribers to resume."),
}


_ENV_NAMES = {"host": "MARK_LISTEN_HOST"}
"""``MARK_HOST`` is the client's default server, so the listen address is spelled out."""


def env_name(setting: str) -> str:
    return _ENV_NAMES.get(setting, "MARK_" + setting.upper())


def flag_name(setting: str) -> str:
    return "--" + setting.replace("_", "-")


# ---------------------------------------------------------------------------------------------
# Defaults


def _xdg(environ: Mapping[str, str], var: str, fallback: str) -> Path:
    value = environ.get(var, "")
    if value and Path(value).is_absolute():  # the XDG spec says relative values are ignored
        return Path(value)
    home = environ.get("HOME")
    return (Path(home) if home else Path.home()) / fallback


def default_state_dir(environ: Mapping[str, str]) -> Path:
    """``$STATE_DIRECTORY`` under systemd, else ``$XDG_STATE_HOME/markproto``."""
    systemd = environ.get("STATE_DIRECTORY", "").split(":")[0]
    if systemd:
        return Path(systemd)
    return _xdg(environ, "XDG_STATE_HOME", ".local/state") / APP_DIR


def default_root(environ: Mapping[str, str]) -> Path:
    """``$STATE_DIRECTORY/root`` under systemd, else ``$XDG_DATA_HOME/markproto/root``."""
    systemd = environ.get("STATE_DIRECTORY", "").split(":")[0]
    if systemd:
        return Path(systemd) / "root"
    return _xdg(environ, "XDG_DATA_HOME", ".local/share") / APP_DIR / "root"


# ---------------------------------------------------------------------------------------------
# Loading


def _read_config_file(path: Path, origin: str) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            data = tomllib.load(handle)
    except OSError as exc:
        raise ConfigError(f"{origin}: cannot read {str(path)!r}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path}: {exc}") from None
    unknown = sorted(set(data) - set(_SETTINGS))
    if unknown:
        raise ConfigError(f"config file {path}: {unknown[0]}: unknown setting")
    return data


def load_config(
    flags: Mapping[str, object | None],
    environ: Mapping[str, str],
    config_file: Path | None,
) -> ServerConfig:
    """Resolve every setting; ``flags`` maps setting names (``rate_limit``) to values or None.

    Keys of ``flags`` that are not settings (such as ``config``) are ignored, so a command can
    pass its whole parameter dict. ``config_file`` falls back to ``MARK_CONFIG``. An empty
    environment variable counts as unset. Relative paths in the config file are taken relative
    to the file's directory.
    """
    raw: dict[str, tuple[object, str]] = {}
    if config_file is None and environ.get("MARK_CONFIG"):
        config_file = Path(environ["MARK_CONFIG"]).expanduser()
        origin = "MARK_CONFIG"
    else:
        origin = "--config"
    if config_file is not None:
        for key, value in _read_config_file(config_file, origin).items():
            if _SETTINGS[key].is_path and isinstance(value, str) and value.strip():
                value = config_file.parent / Path(value).expanduser()
            raw[key] = (value, f"config file {config_file}: {key}")
    for key in _SETTINGS:
        if environ.get(env_name(key)):  # empty counts as unset, as with Go's os.Getenv
            raw[key] = (environ[env_name(key)], env_name(key))
        if flags.get(key) is not None:
            raw[key] = (flags[key], flag_name(key))

    values: dict[str, Any] = {}
    for key, (value, source) in raw.items():
        try:
            values[key] = _SETTINGS[key].parse(value)
        except ValueError as exc:
            raise ConfigError(f"{source}: {exc}") from None
    sources = {key: source for key, (_, source) in raw.items()}

    if ("tls_cert" in values) != ("tls_key" in values):
        given = "tls_cert" if "tls_cert" in values else "tls_key"
        raise ConfigError(
            f"{sources[given]}: tls_cert and tls_key go together; the other one is missing"
        )
    values.setdefault("state_dir", default_state_dir(environ))
    values.setdefault("root", default_root(environ))
    values.setdefault("tokens", values["state_dir"] / TOKENS_NAME)
    return ServerConfig(**values, sources=sources)


def check_paths(config: ServerConfig) -> None:
    """Check the files and directories the configuration names exist, and that the TLS pair is
    one (the app calls this once, before it creates or prints anything).

    Kept apart from ``load_config`` so that stays free of filesystem checks; a default root is
    skipped because the app creates it on first run, and the tokens file is ``tokens``' business.
    """
    checks = [("root", config.root, Path.is_dir, "not a directory")]
    if config.tls_cert is not None and config.tls_key is not None:
        checks += [
            ("tls_cert", config.tls_cert, Path.is_file, "not a file"),
            ("tls_key", config.tls_key, Path.is_file, "not a file"),
        ]
    for key, path, test, problem in checks:
        if key in config.sources and not test(path):
            raise ConfigError(f"{config.sources[key]}: {problem}: {str(path)!r}")
    if config.tls_cert is not None and config.tls_key is not None:
        check_tls_pair(config)


def check_tls_pair(config: ServerConfig) -> None:
    """The certificate file holds PEM certificates, the key file an unencrypted PEM private key,
    and the key is the first certificate's: what the TLS stack would otherwise refuse later, as
    a traceback at startup or a failure of every handshake."""
    from cryptography import x509
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization

    assert config.tls_cert is not None and config.tls_key is not None
    cert_source = config.sources.get("tls_cert", "--tls-cert")
    key_source = config.sources.get("tls_key", "--tls-key")
    try:
        cert_data, key_data = config.tls_cert.read_bytes(), config.tls_key.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {exc.filename}: {exc.strerror}") from None
    try:
        chain = x509.load_pem_x509_certificates(cert_data)
    except ValueError:
        raise ConfigError(
            f"{cert_source}: {str(config.tls_cert)!r} holds no PEM certificate "
            "(-----BEGIN CERTIFICATE-----): give the certificate chain, such as fullchain.pem"
        ) from None
    try:
        key = serialization.load_pem_private_key(key_data, password=None)
    except TypeError:
        raise ConfigError(
            f"{key_source}: {str(config.tls_key)!r} is encrypted: give the key without a "
            "passphrase (openssl pkey -in KEY -out KEY.pem)"
        ) from None
    except (ValueError, UnsupportedAlgorithm):
        raise ConfigError(
            f"{key_source}: {str(config.tls_key)!r} holds no PEM private key "
            "(-----BEGIN PRIVATE KEY-----): give the key file, such as privkey.pem"
        ) from None
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    if chain[0].public_key().public_bytes(der, spki) != key.public_key().public_bytes(der, spki):
        raise ConfigError(
            f"{key_source}: {str(config.tls_key)!r} is not the private key of the certificate "
            f"in {str(config.tls_cert)!r} ({cert_source}): give the key and certificate of one pair"
        )


# ---------------------------------------------------------------------------------------------
# Command-line options


_DEFAULTS = {f.name: f.default for f in fields(ServerConfig) if f.default is not MISSING}


def serve_options(command: F) -> F:
    """Add one option per setting, plus ``--config``, each with its environment variable in the
    help. Values reach the command as raw strings (or None when absent) so that ``load_config``
    parses all sources alike; pass the command's keyword arguments to it as ``flags``."""
    for key in reversed(_SETTINGS):
        setting = _SETTINGS[key]
        help_text = f"{setting.help} [env: {env_name(key)}{_default_text(key)}]"
        if key == "read_only":
            option = click.option(
                "--read-only/--no-read-only", "read_only", default=None, help=help_text
            )
        else:
            option = click.option(
                flag_name(key), key, default=None, metavar=setting.metavar, help=help_text
            )
        command = option(command)
    return click.option(
        "--config",
        "config",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="TOML file with any of these settings (snake_case keys). [env: MARK_CONFIG]",
    )(command)


def _default_text(key: str) -> str:
    default = _DEFAULTS.get(key)
    if default is None or isinstance(default, bool):
        return ""
    return f"; default: {default:g}" if isinstance(default, float) else f"; default: {default}"
