"""A cheap stand-in for `pets-train` in the operator's e2e tests: prints the trainer's metric lines.

Configured by env (set through spec.env): STAND_IN_EPOCH_SECONDS (0.2), STAND_IN_FAIL_RANK (a
machine rank that exits 3 after its first epoch), STAND_IN_FAIL_ONCE (a marker file path: fail
only while it does not exist yet, creating it; once it exists, the reported train_loss is 100 + the
usual, so a test tells the second attempt's epochs from the first's). Write it `host:<path>` for a
path of the test's machine: the local kubelet maps a plain path under one of the pod's mountPaths
(its /tmp emptyDir) into that pod's own volume, as a container would see it.
STAND_IN_RENDEZVOUS=1: before the first epoch every machine waits, as torch.distributed's rendezvous
does, until all NUM_MACHINES of the group are there (rank 0 listens on MASTER_ADDR:MASTER_PORT),
so a group that is only partly placed holds its placed pods forever.
STAND_IN_CHECKPOINT=host:<dir>: rank 0 keeps a checkpoint there as pets-train does with
spec.checkpoint: after each epoch it saves the finished epochs' lines (atomically), then prints the
epoch's line; a run that finds a checkpoint re-reports its epochs (`"resumed": true`) and trains on
from the next one. Each epoch it trains is also appended to <dir>/trained.log (`<pid> <epoch>`:
one pid per run, so per group attempt).
"""
import json
import os
import socket
import sys
import time

rank = int(os.environ["MACHINE_RANK"])
epochs = int(os.environ["EPOCHS"])
pause = float(os.environ.get("STAND_IN_EPOCH_SECONDS", "0.2"))
fail_rank = os.environ.get("STAND_IN_FAIL_RANK")
fail_once = (os.environ.get("STAND_IN_FAIL_ONCE") or "").removeprefix("host:") or None
loss_offset = 100.0 if fail_once and os.path.exists(fail_once) else 0.0
print(f"stand-in rank {rank} of {os.environ['NUM_MACHINES']} at {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
      flush=True)
if os.environ.get("STAND_IN_RENDEZVOUS") == "1" and int(os.environ["NUM_MACHINES"]) > 1:
    address = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
    print("stand-in: waiting for every machine at the rendezvous", flush=True)
    if rank == 0:
        with socket.create_server(address) as server:
            peers = [server.accept()[0] for _ in range(int(os.environ["NUM_MACHINES"]) - 1)]
        for peer in peers:
            peer.sendall(b"go")
            peer.close()
    else:
        while True:
            try:
                peer = socket.create_connection(address, timeout=2)
                break
            except OSError:
                time.sleep(0.2)
        peer.settimeout(None)
        peer.recv(2)
        peer.close()
    print("stand-in: all machines are there", flush=True)
checkpoint_dir = (os.environ.get("STAND_IN_CHECKPOINT") or "").removeprefix("host:") or None
checkpoint = os.path.join(checkpoint_dir, "stand-in-checkpoint.json") if checkpoint_dir else None
history = []
if checkpoint and os.path.exists(checkpoint):
    with open(checkpoint) as file:
        history = json.load(file)
    if rank == 0:
        print(f"resumed from the checkpoint of epoch {history[-1]['epoch']} in {checkpoint_dir}", flush=True)
        for event in history:
            print(json.dumps({**event, "resumed": True}), flush=True)
for epoch in range(len(history), epochs):
    time.sleep(pause)
    if fail_rank is not None and int(fail_rank) == rank and epoch == 1:
        if not fail_once or not os.path.exists(fail_once):
            if fail_once:
                open(fail_once, "w").close()
            print("stand-in: failing on purpose", file=sys.stderr, flush=True)
            sys.exit(3)
    if rank == 0:
        event = {"event": "epoch", "epoch": epoch, "accuracy": 0.5 + epoch / (2 * epochs),
                 "train_loss": loss_offset + 1.0 / (epoch + 1), "seconds": pause}
        if checkpoint:
            history.append(event)
            with open(checkpoint + ".new", "w") as file:
                json.dump(history, file)
            os.replace(checkpoint + ".new", checkpoint)
            with open(os.path.join(checkpoint_dir, "trained.log"), "a") as file:
                file.write(f"{os.getpid()} {epoch}\n")
        print(f"epoch {epoch} done", flush=True)
        print(json.dumps(event), flush=True)
if rank == 0:
    print(json.dumps({"event": "done", "epochs": epochs}), flush=True)
