"""cairn's Proxmox VE REST driver: pveproxy (HTTPS, port 8006) with a least-privilege API token.

`adapter` is the Proxmox port's REST adapter (actors/vm/pve.py); beneath it `wire` holds the
pure encoding and parsing (golden-tested), `errors` the error mapping, `client` the HTTP
client, `tasks` the UPID polling; `privileges` and `termproxy` serve `cairn pve` and the
serial console (docs/vm.md, "Running off-node with a token").
"""
