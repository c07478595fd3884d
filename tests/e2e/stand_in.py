"""A cheap stand-in for `pets-train` in the operator's e2e tests: prints the trainer's metric lines.

Configured by env (set through spec.env): STAND_IN_EPOCH_SECONDS (0.2), STAND_IN_FAIL_RANK (a
machine rank that exits 3 after its first epoch), STAND_IN_FAIL_ONCE (a marker file path: fail
only while it does not exist yet, creating it).
"""
import json
import os
import sys
import time

rank = int(os.environ["MACHINE_RANK"])
epochs = int(os.environ["EPOCHS"])
pause = float(os.environ.get("STAND_IN_EPOCH_SECONDS", "0.2"))
fail_rank = os.environ.get("STAND_IN_FAIL_RANK")
fail_once = os.environ.get("STAND_IN_FAIL_ONCE")
print(f"stand-in rank {rank} of {os.environ['NUM_MACHINES']} at {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
      flush=True)
for epoch in range(epochs):
    time.sleep(pause)
    if fail_rank is not None and int(fail_rank) == rank and epoch == 1:
        if not fail_once or not os.path.exists(fail_once):
            if fail_once:
                open(fail_once, "w").close()
            print("stand-in: failing on purpose", file=sys.stderr, flush=True)
            sys.exit(3)
    if rank == 0:
        print(f"epoch {epoch} done", flush=True)
        print(json.dumps({"event": "epoch", "epoch": epoch, "accuracy": 0.5 + epoch / (2 * epochs),
                          "train_loss": 1.0 / (epoch + 1), "seconds": pause}), flush=True)
if rank == 0:
    print(json.dumps({"event": "done", "epochs": epochs}), flush=True)
