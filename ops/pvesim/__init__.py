"""Simulated Proxmox VE cluster: fake qm/pvesh/pvesm, SSH nodes and guests on loopback."""
