"""``mark mcp``: the MCP bridge for agents, on the same client setup as every other command."""

from __future__ import annotations

import click

from markproto.client.cli.options import INSECURE, TIMEOUT, TRUST_NEW
from markproto.client.cli.output import note

_EXTRA = frozenset({"mcp", "pydantic", "pydantic_core", "anyio", "starlette", "httpx"})
"""Top-level modules of the ``mcp`` extra: one of them missing means the extra is not installed."""


@click.command()
@click.option(
    "-host",
    "--host",
    "hosts",
    metavar="mark://HOST[:PORT]",
    multiple=True,
    help="Server, repeatable; the first takes bare paths (else MARK_HOST).",
)
@click.option(
    "-token",
    "--token",
    metavar="TOKEN",
    help="Token for the -host server only (else MARK_AUTH or tokens.toml).",
)
@click.option(
    "-profile",
    "--profile",
    type=click.Choice(["lean", "full"]),
    default="full",
    show_default=True,
    envvar="MARK_MCP_PROFILE",
    help="lean leaves out the advanced tools (else MARK_MCP_PROFILE).",
)
@INSECURE
@TRUST_NEW
@TIMEOUT
def mcp(
    hosts: tuple[str, ...],
    token: str | None,
    profile: str,
    insecure: bool,
    trust_new: bool,
    timeout: float,
) -> None:
    """Serve the MCP bridge for agents on stdin and stdout (see docs/MCP.md).

    One connection per server serves the whole session; stored tokens are reread on every
    call, so `mark token add` takes effect at once. With several -host servers,
    mark_lookup_all searches them all; -token goes to the first only. Ends when stdin closes.
    """
    import asyncio

    from markproto.client import Client, UsageError, environment

    try:
        from markproto.client.mcp import serve
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] not in _EXTRA:
            raise
        raise click.UsageError(
            "mark mcp needs the mcp extra (the MCP SDK), which is not installed: "
            "pip install 'markproto[mcp]'"
        ) from None
    from markproto.protocol.errors import InvalidURL
    from markproto.protocol.url import MarkURL, parse_url

    texts = hosts or tuple(filter(None, [environment.variable(environment.HOST)]))
    hint = "-host" if hosts else "MARK_HOST"
    servers: list[MarkURL] = []
    for text in texts:
        try:
            server = parse_url(text)
        except InvalidURL as exc:
            raise click.BadParameter(str(exc), param_hint=hint) from None
        if server.path != "/" or server.anchor:
            raise click.BadParameter("give mark://host[:port] without a path", param_hint=hint)
        if any(known.authority == server.authority for known in servers):
            raise click.BadParameter(f"{server.identity} is given twice", param_hint=hint)
        servers.append(server)
    target = servers[0] if servers else None
    if target is None and (token or environment.variable(environment.AUTH)):
        note("-token and MARK_AUTH go only to the -host server; without -host they are unused")
        token = None
    try:
        client = Client.from_environment(
            target,
            token=token or None,
            insecure=insecure,
            trust_new=trust_new,
            timeout=timeout,
            cache=False,
            note=note,  # and no confirm: stdin carries the protocol, no one can answer a prompt
        )
    except UsageError as exc:
        raise click.BadParameter(str(exc), param_hint="-token/MARK_AUTH") from None
    asyncio.run(serve(client, servers, "lean" if profile == "lean" else "full"))
