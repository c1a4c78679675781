"""Server configuration: precedence, validation messages, defaults, and the serve options."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from markproto.server.config import (
    ConfigError,
    ServerConfig,
    check_paths,
    is_default_root,
    load_config,
    parse_duration,
    serve_options,
    tokens_explicit,
)

HOME = {"HOME": "/home/ada"}


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults() -> None:
    config = load_config({}, HOME, None)
    assert config == ServerConfig(
        root=Path("/home/ada/.local/share/markproto/root"),
        state_dir=Path("/home/ada/.local/state/markproto"),
        host="::",
        port=6309,
        tokens=Path("/home/ada/.local/state/markproto/tokens.toml"),
        read_only=False,
        rate_limit=50.0,
        rate_burst=100,
        tls_cert=None,
        tls_key=None,
        max_streams=32,
        request_timeout=10.0,
        idle_timeout=30.0,
        log_format="text",
        log_level="info",
        scan_interval=30.0,
    )
    assert config.sources == {}
    assert is_default_root(config)
    assert not tokens_explicit(config)


def test_precedence_defaults_file_env_flags(tmp_path: Path) -> None:
    config_file = write(
        tmp_path / "server.toml", "port = 7000\nrate_limit = 5\nhost = '127.0.0.1'\n"
    )
    env = {**HOME, "MARK_PORT": "7001", "MARK_RATE_LIMIT": "6"}
    config = load_config({"port": "7002"}, env, config_file)
    assert config.port == 7002
    assert config.rate_limit == 6.0
    assert config.host == "127.0.0.1"
    assert config.rate_burst == 100
    assert config.sources == {
        "port": "--port",
        "rate_limit": "MARK_RATE_LIMIT",
        "host": f"config file {config_file}: host",
    }
    assert load_config({}, env, config_file).port == 7001
    assert load_config({}, HOME, config_file).port == 7000


def test_flags_that_are_none_or_not_settings_are_ignored() -> None:
    config = load_config({"port": None, "config": None, "read_only": None}, HOME, None)
    assert config.port == 6309
    assert config.read_only is False


def test_config_file_from_environment_and_relative_paths(tmp_path: Path) -> None:
    write(tmp_path / "c.toml", 'root = "content"\ntls_cert = "c.pem"\ntls_key = "/etc/k.pem"\n')
    config = load_config({}, {**HOME, "MARK_CONFIG": str(tmp_path / "c.toml")}, None)
    assert config.root == tmp_path / "content"
    assert config.tls_cert == tmp_path / "c.pem"
    assert config.tls_key == Path("/etc/k.pem")
    assert not is_default_root(config)


def test_native_toml_types(tmp_path: Path) -> None:
    text = "read_only = true\nrate_limit = 2.5\nrate_burst = 7\nidle_timeout = '1m'\n"
    config = load_config({}, HOME, write(tmp_path / "c.toml", text))
    assert (config.read_only, config.rate_limit, config.rate_burst) == (True, 2.5, 7)
    assert config.idle_timeout == 60.0


@pytest.mark.parametrize(
    ("value", "expected"),
    [("1", True), ("true", True), ("YES", True), ("0", False), ("False", False), ("no", False)],
)
def test_booleans(value: str, expected: bool) -> None:
    assert load_config({}, {**HOME, "MARK_READ_ONLY": value}, None).read_only is expected


def test_flag_false_overrides_env_true() -> None:
    config = load_config({"read_only": False}, {**HOME, "MARK_READ_ONLY": "1"}, None)
    assert config.read_only is False
    assert config.sources["read_only"] == "--read-only"


def test_durations() -> None:
    env = {**HOME, "MARK_REQUEST_TIMEOUT": "500ms", "MARK_IDLE_TIMEOUT": "1h30m"}
    config = load_config({"scan_interval": "0"}, env, None)
    assert config.request_timeout == 0.5
    assert config.idle_timeout == 5400.0
    assert config.scan_interval == 0.0
    assert parse_duration("90d") == 90 * 86400
    assert parse_duration("2w") == 14 * 86400


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"MARK_PORT": "abc"}, "MARK_PORT: not a port number: 'abc'"),
        ({"MARK_PORT": "70000"}, "MARK_PORT: not a port number: '70000'"),
        ({"MARK_RATE_LIMIT": "-1"}, "MARK_RATE_LIMIT: must be >= 0"),
        ({"MARK_RATE_LIMIT": "inf"}, "MARK_RATE_LIMIT: must be finite: 'inf'"),
        ({"MARK_RATE_LIMIT": "fast"}, "MARK_RATE_LIMIT: not a number: 'fast'"),
        ({"MARK_RATE_BURST": "0"}, "MARK_RATE_BURST: must be >= 1"),
        ({"MARK_RATE_BURST": "1.5"}, "MARK_RATE_BURST: not an integer: '1.5'"),
        ({"MARK_READ_ONLY": "maybe"}, "MARK_READ_ONLY: not a boolean"),
        ({"MARK_MAX_STREAMS": "0"}, "MARK_MAX_STREAMS: must be >= 1"),
        ({"MARK_REQUEST_TIMEOUT": "-1s"}, "MARK_REQUEST_TIMEOUT: not a duration"),
        ({"MARK_REQUEST_TIMEOUT": "-1"}, "MARK_REQUEST_TIMEOUT: must be >= 0"),
        ({"MARK_IDLE_TIMEOUT": "0"}, "MARK_IDLE_TIMEOUT: must be > 0"),
        ({"MARK_SCAN_INTERVAL": "soon"}, "MARK_SCAN_INTERVAL: not a duration"),
        ({"MARK_LOG_FORMAT": "xml"}, "MARK_LOG_FORMAT: must be one of text, json: 'xml'"),
        ({"MARK_LOG_LEVEL": "loud"}, "MARK_LOG_LEVEL: must be one of debug"),
        ({"MARK_LISTEN_HOST": " "}, "MARK_LISTEN_HOST: not a host or address: ' '"),
        ({"MARK_TOKENS": "  "}, "MARK_TOKENS: must not be empty"),
        ({"MARK_STATE_DIR": " "}, "MARK_STATE_DIR: must not be empty"),
    ],
)
def test_environment_errors_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config({}, {**HOME, **env}, None)
    assert str(info.value).startswith(message)


def test_empty_environment_values_count_as_unset() -> None:
    env = {**HOME, "MARK_ROOT": "", "MARK_PORT": "", "MARK_TLS_CERT": "", "MARK_CONFIG": ""}
    config = load_config({}, env, None)
    assert config == load_config({}, HOME, None)
    assert config.sources == {}


def test_flag_errors_name_the_flag() -> None:
    with pytest.raises(ConfigError, match=r"^--rate-burst: not an integer: 'x'$"):
        load_config({"rate_burst": "x"}, HOME, None)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("rate_limit = -1", "rate_limit: must be >= 0"),
        ("port = 'x'", "port: not a port number: 'x'"),
        ("port = true", "port: not a port number: True"),
        ("read_only = 3", "read_only: must be a string, not 3"),
        ("ratelimit = 5", "ratelimit: unknown setting"),
        ("[server]\nport = 1", "server: unknown setting"),
        ("port = ", "Invalid value"),
    ],
)
def test_config_file_errors_name_file_and_setting(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path / "x.toml", text + "\n")
    with pytest.raises(ConfigError) as info:
        load_config({}, HOME, path)
    assert str(info.value).startswith(f"config file {path}: {message}")


def test_missing_config_file_names_its_source(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^--config: cannot read"):
        load_config({}, HOME, tmp_path / "absent.toml")
    with pytest.raises(ConfigError, match=r"^MARK_CONFIG: cannot read"):
        load_config({}, {**HOME, "MARK_CONFIG": str(tmp_path / "absent.toml")}, None)


def test_tls_pair_rule(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^MARK_TLS_CERT: tls_cert and tls_key go together"):
        load_config({}, {**HOME, "MARK_TLS_CERT": "c.pem"}, None)
    with pytest.raises(ConfigError, match=r"^--tls-key: tls_cert and tls_key go together"):
        load_config({"tls_key": "k.pem"}, HOME, None)
    config = load_config({"tls_key": "k.pem"}, {**HOME, "MARK_TLS_CERT": "c.pem"}, None)
    assert (config.tls_cert, config.tls_key) == (Path("c.pem"), Path("k.pem"))


def test_xdg_defaults() -> None:
    env = {**HOME, "XDG_DATA_HOME": "/data", "XDG_STATE_HOME": "/state"}
    config = load_config({}, env, None)
    assert config.root == Path("/data/markproto/root")
    assert config.state_dir == Path("/state/markproto")
    assert config.tokens == Path("/state/markproto/tokens.toml")


def test_relative_xdg_values_are_ignored() -> None:
    config = load_config({}, {**HOME, "XDG_DATA_HOME": "data", "XDG_STATE_HOME": "st"}, None)
    assert config.root == Path("/home/ada/.local/share/markproto/root")
    assert config.state_dir == Path("/home/ada/.local/state/markproto")


def test_systemd_state_directory() -> None:
    env = {**HOME, "STATE_DIRECTORY": "/var/lib/markproto:/var/lib/other", "XDG_DATA_HOME": "/d"}
    config = load_config({}, env, None)
    assert config.state_dir == Path("/var/lib/markproto")
    assert config.root == Path("/var/lib/markproto/root")
    assert config.tokens == Path("/var/lib/markproto/tokens.toml")
    assert is_default_root(config)


def test_home_from_the_process_when_the_environment_has_none(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert load_config({}, {}, None).state_dir == tmp_path / ".local/state/markproto"


def test_explicit_state_dir_moves_the_default_tokens_file() -> None:
    config = load_config({"state_dir": "/srv/state"}, HOME, None)
    assert config.tokens == Path("/srv/state/tokens.toml")
    assert not tokens_explicit(config)
    assert tokens_explicit(load_config({}, {**HOME, "MARK_TOKENS": "/t.toml"}, None))


def test_check_paths(tmp_path: Path) -> None:
    check_paths(load_config({}, HOME, None))  # a default root is created later by the app
    check_paths(load_config({"root": str(tmp_path)}, HOME, None))
    with pytest.raises(ConfigError, match=r"^MARK_ROOT: not a directory: "):
        check_paths(load_config({}, {**HOME, "MARK_ROOT": str(tmp_path / "nope")}, None))
    flags = {"tls_cert": str(tmp_path / "c.pem"), "tls_key": str(tmp_path / "k.pem")}
    write(tmp_path / "k.pem", "key")
    with pytest.raises(ConfigError, match=r"^--tls-cert: not a file: "):
        check_paths(load_config(flags, HOME, None))


@given(st.integers(0, 65535))
def test_any_port_round_trips(port: int) -> None:
    assert load_config({}, {**HOME, "MARK_PORT": str(port)}, None).port == port


@given(st.text(max_size=20))
def test_arbitrary_env_values_raise_only_config_errors(value: str) -> None:
    for name in ("MARK_PORT", "MARK_RATE_LIMIT", "MARK_IDLE_TIMEOUT", "MARK_READ_ONLY"):
        message = ""
        try:
            load_config({}, {**HOME, name: value}, None)
        except ConfigError as exc:
            message = str(exc)
        assert not message or message.startswith(name + ": ")


def test_serve_options_feed_load_config() -> None:
    seen: dict[str, Any] = {}

    @click.command()
    @serve_options
    def serve(**params: Any) -> None:
        seen["config"] = load_config(params, HOME, params["config"])

    result = CliRunner().invoke(
        serve,
        ["--port", "7100", "--read-only", "--rate-limit", "0", "--tls-cert", "c", "--tls-key", "k"],
    )
    assert result.exit_code == 0, result.output
    config = seen["config"]
    assert (config.port, config.read_only, config.rate_limit) == (7100, True, 0.0)
    assert (config.tls_cert, config.tls_key) == (Path("c"), Path("k"))

    help_text = CliRunner().invoke(serve, ["--help"]).output
    for env in ("MARK_ROOT", "MARK_PORT", "MARK_RATE_BURST", "MARK_SCAN_INTERVAL", "MARK_CONFIG"):
        assert env in help_text
    for flag in ("--state-dir", "--no-read-only", "--max-streams", "--log-format", "--config"):
        assert flag in help_text


def test_the_clients_mark_host_does_not_move_the_server() -> None:
    env = {"MARK_HOST": "mark://localhost", "HOME": "/home/x"}
    assert load_config({}, env, None).host == "::"
    assert load_config({}, {**env, "MARK_LISTEN_HOST": "127.0.0.1"}, None).host == "127.0.0.1"


def test_index_workers_trades_startup_time_for_memory() -> None:
    env = {"HOME": "/home/x"}
    assert load_config({}, env, None).index_workers == 2
    assert load_config({}, {**env, "MARK_INDEX_WORKERS": "0"}, None).index_workers == 0
    with pytest.raises(ConfigError, match="MARK_INDEX_WORKERS"):
        load_config({}, {**env, "MARK_INDEX_WORKERS": "-1"}, None)
    assert load_config({"index_workers": "4"}, env, None).index_workers == 4


def test_watch_settings_bound_what_subscriptions_cost() -> None:
    env = {"HOME": "/home/x"}
    config = load_config({}, env, None)
    assert (config.watch_limit, config.watch_connection_limit) == (4096, 16)
    assert (config.watch_heartbeat, config.watch_log) == (20.0, 4096)
    tuned = {
        **env,
        "MARK_WATCH_LIMIT": "0",
        "MARK_WATCH_CONNECTION_LIMIT": "2",
        "MARK_WATCH_HEARTBEAT": "500ms",
        "MARK_WATCH_LOG": "10",
    }
    config = load_config({}, tuned, None)
    assert (config.watch_limit, config.watch_connection_limit) == (0, 2)
    assert (config.watch_heartbeat, config.watch_log) == (0.5, 10)
    for name, bad in (
        ("MARK_WATCH_LIMIT", "-1"),
        ("MARK_WATCH_CONNECTION_LIMIT", "0"),
        ("MARK_WATCH_HEARTBEAT", "0"),
        ("MARK_WATCH_LOG", "0"),
    ):
        with pytest.raises(ConfigError, match=name):
            load_config({}, {**env, name: bad}, None)
