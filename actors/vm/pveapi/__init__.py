"""cairn's Proxmox VE REST driver: pveproxy (HTTPS, port 8006) with a least-privilege API token.

`wire` holds the pure encoding and parsing (golden-tested), `errors` the error mapping,
`client` the HTTP client, `tasks` the UPID polling, `driver` the transport that answers the
command lines the rest of the VM service speaks (docs/vm.md, "Running off-node with a token").
"""
