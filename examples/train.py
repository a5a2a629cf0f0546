"""A small real training job for paiweb: linear regression by SGD on synthetic data (numpy),
checkpointed with EasyCkpt and resumed from its latest checkpoint.

Submit it with the user command `python examples/train.py` (the path as the pod sees it:
an absolute path to this file, e.g. /srv/paiweb/examples/train.py). Environment:

    TOTAL_STEPS   steps to train (default 200)
    STEP_SECONDS  sleep per step, to make a short job last (default 0.05)
    CKPT_EVERY    checkpoint every N steps (default 20)
    LOG_EVERY     print progress every N steps (default 10)
    SEED          data seed (default 0)

Every step's batch is drawn from a generator seeded by (SEED, step), so a run resumed from
step N continues exactly as an uninterrupted one would. Rank 0 saves; every rank resumes.
On SIGTERM (a stop or a preemption) rank 0 saves the current step before exiting, within
the grace period paiweb gives it.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import easyckpt
import numpy as np

FEATURES = 8
BATCH = 64
LEARNING_RATE = 0.05


def env_int(name: str, default: int) -> int:
    return int(os.environ.get(name) or default)


def batch(seed: int, step: int, true_w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng([seed, step])
    x = rng.normal(size=(BATCH, FEATURES))
    y = x @ true_w + 0.5 + rng.normal(scale=0.01, size=BATCH)
    return x, y


def main() -> int:
    total = env_int("TOTAL_STEPS", 200)
    pause = float(os.environ.get("STEP_SECONDS") or 0.05)
    ckpt_every = env_int("CKPT_EVERY", 20)
    log_every = env_int("LOG_EVERY", 10)
    seed = env_int("SEED", 0)
    rank = env_int("RANK", 0)
    saver = rank == 0

    true_w = np.random.default_rng(seed).normal(size=FEATURES)
    resumed = easyckpt.load_latest()
    if resumed is None:
        step, state = 0, {"w": np.zeros(FEATURES), "b": 0.0}
        print(f"rank {rank}/{os.environ.get('WORLD_SIZE', 1)}: starting from scratch", flush=True)
    else:
        step, state = resumed
        print(f"rank {rank}: resumed from step {step}", flush=True)

    stopping = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.append(signum))

    loss = float("nan")
    while step < total:
        step += 1
        x, y = batch(seed, step, true_w)
        error = x @ state["w"] + state["b"] - y
        loss = float(np.mean(error**2))
        state["w"] = state["w"] - LEARNING_RATE * 2 * x.T @ error / BATCH
        state["b"] = state["b"] - LEARNING_RATE * 2 * float(np.mean(error))
        if step % log_every == 0:
            print(f"step {step} loss {loss:.6f}", flush=True)
        if saver and step % ckpt_every == 0:
            easyckpt.save(state, step)
        if stopping:
            if saver:
                if step % ckpt_every:
                    easyckpt.save(state, step)
                easyckpt.wait()
            print(f"SIGTERM at step {step}: checkpoint saved, exiting", flush=True)
            return 128 + signal.SIGTERM
        time.sleep(pause)

    easyckpt.wait()
    print(f"final step {step} loss {loss:.6f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
