"""Which namespaces a run may read, and the identities its tools act as."""
