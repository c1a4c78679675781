"""The markproto server: an asyncio QUIC transport over a versioned, hash-chained markdown store."""
