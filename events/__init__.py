"""cairn's event model and its plumbing: attrs events, the store, NATS publishing, embedded NATS."""
