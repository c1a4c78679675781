"""Storage: the on-disk versioned store, crash recovery, the in-memory snapshot, and `Content`,
the one door to stored state."""
