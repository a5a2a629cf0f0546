"""The EasyCkpt-style helper pods import: async atomic saves, keep-K, load the latest; and
examples/train.py resuming from it in a fresh interpreter, as a restarted pod would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from apps.agent.easyckpt import easyckpt

EASYCKPT_DIR = Path(easyckpt.__file__).parent
TRAIN = Path(__file__).resolve().parents[2] / "examples" / "train.py"


@pytest.fixture
def ckpt_dir(tmp_path, monkeypatch):
    directory = tmp_path / "checkpoints"
    monkeypatch.setenv("PAIWEB_CHECKPOINT_DIR", str(directory))
    monkeypatch.delenv("PAIWEB_CKPT_KEEP", raising=False)
    yield directory
    easyckpt.wait()


def files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name != "manifest.jsonl")


def test_it_returns_none_when_there_is_no_checkpoint(ckpt_dir):
    assert easyckpt.load_latest() is None


def test_it_saves_asynchronously_and_loads_the_latest(ckpt_dir):
    state = {"w": [1.0, 2.0], "step_note": "a"}
    easyckpt.save(state, 10)
    state["w"].append(3.0)  # after save() returns: must not leak into step 10's checkpoint
    easyckpt.save(state, 20)
    easyckpt.wait()
    assert easyckpt.load_latest() == (20, {"w": [1.0, 2.0, 3.0], "step_note": "a"})
    assert files(ckpt_dir) == ["ckpt-000000000010.pkl", "ckpt-000000000020.pkl"]
    entries = [json.loads(line) for line in (ckpt_dir / "manifest.jsonl").read_text().splitlines()]
    assert [(e["step"], e["file"]) for e in entries] == [
        (10, "ckpt-000000000010.pkl"),
        (20, "ckpt-000000000020.pkl"),
    ]
    assert all(e["bytes"] == (ckpt_dir / e["file"]).stat().st_size for e in entries)


def test_it_keeps_the_last_k(ckpt_dir, monkeypatch):
    monkeypatch.setenv("PAIWEB_CKPT_KEEP", "2")
    for step in range(1, 6):
        easyckpt.save({"step": step}, step)
    easyckpt.wait()
    assert files(ckpt_dir) == ["ckpt-000000000004.pkl", "ckpt-000000000005.pkl"]
    assert len((ckpt_dir / "manifest.jsonl").read_text().splitlines()) == 5
    assert easyckpt.load_latest() == (5, {"step": 5})


def damage(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:-5] + b"xxxxx")


def test_damaged_checkpoints_do_not_count_among_those_kept(ckpt_dir):
    """Three saves damaged on disk one after another: the cleanup after each save keeps the
    newest three whole checkpoints, so the last whole one is still there to resume from."""
    for step in (1, 2, 3):
        easyckpt.save({"step": step}, step)
    easyckpt.wait()
    for step in (4, 5, 6):
        easyckpt.save({"step": step}, step)
        easyckpt.wait()
        damage(ckpt_dir / f"ckpt-{step:012d}.pkl")
    assert easyckpt.load_latest() == (3, {"step": 3})
    easyckpt.save({"step": 7}, 7)
    easyckpt.wait()
    assert files(ckpt_dir) == [
        "ckpt-000000000002.pkl",
        "ckpt-000000000003.pkl",
        "ckpt-000000000007.pkl",
    ]


def test_it_ignores_temporary_and_damaged_files(ckpt_dir):
    easyckpt.save({"ok": True}, 7)
    easyckpt.wait()
    # A save interrupted before its rename leaves only a temporary file …
    (ckpt_dir / ".ckpt-000000000009.pkl.tmp-123-456").write_bytes(b"EASYCKPT1\nhalf")
    # … and a file damaged after the fact fails its digest.
    good = (ckpt_dir / "ckpt-000000000007.pkl").read_bytes()
    (ckpt_dir / "ckpt-000000000008.pkl").write_bytes(good[:-5] + b"xxxxx")
    assert easyckpt.load_latest() == (7, {"ok": True})


def test_it_says_in_the_log_which_damaged_checkpoints_it_passed_over(ckpt_dir, capsys):
    easyckpt.save({"ok": True}, 7)
    easyckpt.wait()
    good = (ckpt_dir / "ckpt-000000000007.pkl").read_bytes()
    (ckpt_dir / "ckpt-000000000008.pkl").write_bytes(good[: len(good) // 2])  # truncated
    assert easyckpt.load_latest() == (7, {"ok": True})
    assert capsys.readouterr().err == (
        "easyckpt: ckpt-000000000008.pkl damaged (checksum or contents): resuming from step 7\n"
    )
    (ckpt_dir / "ckpt-000000000007.pkl").write_bytes(b"EASYCKPT1\n")
    assert easyckpt.load_latest() is None
    assert "resuming from the start" in capsys.readouterr().err
    easyckpt.save({"ok": True}, 9)
    easyckpt.wait()
    assert easyckpt.load_latest() == (9, {"ok": True})
    assert capsys.readouterr().err == ""  # nothing passed over


def test_it_writes_through_a_temporary_file_and_a_rename(ckpt_dir, monkeypatch):
    seen = []
    real_replace = os.replace

    def spy(src, dst):
        seen.append((Path(src).name, Path(dst).name, Path(src).exists()))
        return real_replace(src, dst)

    monkeypatch.setattr(easyckpt.os, "replace", spy)
    easyckpt.save({"x": 1}, 3)
    easyckpt.wait()
    [(src, dst, existed)] = seen
    assert src.startswith(".ckpt-000000000003.pkl.tmp-") and dst == "ckpt-000000000003.pkl"
    assert existed
    assert files(ckpt_dir) == ["ckpt-000000000003.pkl"]


def test_it_raises_a_failed_background_save_in_wait(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the directory should be")
    monkeypatch.setenv("PAIWEB_CHECKPOINT_DIR", str(blocker))
    easyckpt.save({"x": 1}, 1)
    with pytest.raises(easyckpt.CheckpointError):
        easyckpt.wait()
    easyckpt.wait()  # reported once


def test_train_py_resumes_from_its_latest_checkpoint(tmp_path):
    env = {
        **os.environ,
        "PYTHONPATH": str(EASYCKPT_DIR),
        "PAIWEB_CHECKPOINT_DIR": str(tmp_path / "ckpt"),
        "STEP_SECONDS": "0",
        "CKPT_EVERY": "10",
        "RANK": "0",
    }
    first = subprocess.run(
        [sys.executable, str(TRAIN)],
        env={**env, "TOTAL_STEPS": "30"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert first.returncode == 0, first.stderr  # needs numpy (a project dependency)
    assert "starting from scratch" in first.stdout and "final step 30" in first.stdout
    second = subprocess.run(
        [sys.executable, str(TRAIN)],
        env={**env, "TOTAL_STEPS": "50"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert second.returncode == 0, second.stderr
    assert "resumed from step 30" in second.stdout and "final step 50" in second.stdout
    loss = float(second.stdout.strip().rsplit(" ", 1)[1])
    assert loss < 0.05  # it did learn
