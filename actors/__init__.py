"""pykka actors that own cairn's state, and the jobs they start; one folder per domain."""
