"""``python -m markproto.client.cli``: the ``mark`` command."""

from markproto.client.cli import main

main()
