"""The markproto client: a pooled QUIC client library, the ``mark`` CLI and the MCP bridge."""
