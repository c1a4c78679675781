"""``mark token``: the tokens stored in ``tokens.toml`` (``environment.home``), one per host."""

from __future__ import annotations

import sys

import click

from markproto.client.cli.options import resolve
from markproto.client.cli.output import Failed, print_json
from markproto.client.cli.session import token_store


@click.group()
def token() -> None:
    """Manage stored tokens.

    They live in tokens.toml, readable by you alone, in MARK_HOME, else in ~/.mark where it
    exists, else in ~/.config/markproto ($XDG_CONFIG_HOME/markproto).
    """


@token.command(name="add")
@click.argument("url")
@click.argument("secret", metavar="[TOKEN]", required=False)
def token_add(url: str, secret: str | None) -> None:
    """Store TOKEN for URL's host (read from stdin, or asked for, when left out)."""
    target = resolve(url)
    if secret is None:
        stdin = sys.stdin
        if stdin.isatty():
            secret = click.prompt("Token", hide_input=True, err=True)
        else:
            secret = stdin.readline()
        secret = secret.strip()
    from markproto.client import TokenStoreError

    store = token_store()
    try:
        store.add(target.authority, secret)
    except TokenStoreError as exc:
        raise Failed(str(exc)) from None
    click.echo(f"mark: token stored for {target.authority} in {store.path}", err=True)


@token.command(name="remove")
@click.argument("url")
def token_remove(url: str) -> None:
    """Forget the token stored for URL's host."""
    target = resolve(url)
    from markproto.client import TokenStoreError

    store = token_store()
    try:
        removed = store.remove(target.authority)
    except TokenStoreError as exc:
        raise Failed(str(exc)) from None
    if not removed:
        raise Failed(f"no token stored for {target.authority}")
    click.echo(f"mark: token removed for {target.authority}", err=True)


@token.command(name="list")
@click.option("-json", "--json", "as_json", is_flag=True, help="Print one JSON object.")
def token_list(as_json: bool) -> None:
    """Print the hosts that have a stored token (never the tokens)."""
    authorities = sorted(token_store().load())
    if as_json:
        print_json({"tokens": authorities})
    elif authorities:
        click.echo("\n".join(authorities))
    else:
        click.echo("No stored tokens.", err=True)
