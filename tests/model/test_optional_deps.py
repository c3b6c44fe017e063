"""The library and the trainer without the optional packages a machine may lack.

A GPU machine's Python image may have no isal and no zstandard, and a user's machine may
lack pyarrow too. None of them is needed to train on synthetic data or on binary shards, so ``models.dlrm.train``
must import and train with all three missing; the conversion of Criteo text (pyarrow) then
fails with one line naming the extra to install. The packages are blocked in a subprocess by a
finder at the head of ``sys.meta_path`` that refuses them, as an interpreter without them
installed would (a ``None`` entry in ``sys.modules`` instead makes scikit-learn, which asks
``sys.modules`` whether pyarrow is loaded, fail on the ``None``).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BLOCKED = ("isal", "zstandard", "pyarrow")

SCRIPT = """
import importlib.abc, json, sys

BLOCKED = {blocked!r}


class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}} (blocked)", name=name)
        return None


sys.meta_path.insert(0, Refuse())
import models.dlrm.train  # noqa: F401  (the chain train -> data -> shards -> preprocess)
from models.dlrm import main
from models.dlrm.data import preprocess

out, text = sys.argv[1], sys.argv[2]
rc = main.main(
    ["--preset", "tiny", "--devices", "1", "--steps", "3", "--log-every", "1", "--out", out,
     "--no-progress", "--eval-every", "0", "--eval-rows", "256", "--checkpoint-every", "0"]
)
rc_convert = preprocess.main([text, "--out", out + "/shards", "--config", "tiny"])
loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
print("RESULT " + json.dumps({{"train": rc, "convert": rc_convert, "loaded": loaded}}))
"""


def test_trainer_imports_and_trains_without_isal_zstandard_and_pyarrow(tmp_path):
    text = tmp_path / "train.txt"  # one Criteo Kaggle line: label, 13 counts, 26 hex ids
    text.write_text("\t".join(["1"] + ["3"] * 13 + ["68fd1e64"] * 26) + "\n")
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # --devices decides
    env["JAX_PLATFORMS"] = "cpu"
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(blocked=BLOCKED), str(tmp_path / "run"), str(text)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-4000:]
    result = json.loads(output.split("RESULT ", 1)[1].splitlines()[0])
    assert result == {"train": 0, "convert": 2, "loaded": []}, output[-4000:]
    # the conversion's one line names the package and the extra that has it
    assert (
        "error: converting Criteo text to shards needs the optional package pyarrow (module "
        "pyarrow), which is not installed: pip install 'jax_lossy_comm[train]'" in run.stderr
    ), run.stderr[-3000:]
    records = [
        json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    ]
    train = [r for r in records if r.get("kind") == "train"]
    assert [r["step"] for r in train] == [1, 2, 3]
    assert all(math.isfinite(r["loss"]) and r["raw_bytes"] > r["frame_bytes"] > 0 for r in train)
