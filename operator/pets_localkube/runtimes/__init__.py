"""How the local kubelet runs a pod: as local processes (`process.py`, each container under its own
`shim.py`), as docker containers (`docker.py`, `docker_args.py`), or simulated (`simulated.py`).

The workers see the kubelet through `process.KubeletHandle`; nothing here imports the kubelet.
"""
