"""Golden frames: the compiled codec writes the same bytes as when the corpus was recorded.

``tests/native/golden/corpus.py`` compresses a fixed corpus (every form, dtype, mode and edge case,
small capacities, bad bounds, every real dump and the exchange shape) and digests frames, byte
counts, decoded values and the statuses of valid and corrupted frames. A refactor of the codec
must leave every digest as it is; a deliberate format change regenerates the file in its own
commit. The CUDA kernels are held to the same corpus in ``test_cuda_emulation.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "golden"))
import corpus  # noqa: E402

from jax_lossy_comm import _ffi  # noqa: E402


@pytest.mark.skipif(not _ffi.available(), reason="compiled extension not built")
def test_frames_match_golden_corpus():
    want = json.loads(corpus.GOLDEN.read_text())
    got = corpus.compute()
    if not (corpus.DUMPS / "manifest.json").is_file():
        want = {k: v for k, v in want.items() if not k.startswith(("dump ", "exchange "))}
    assert set(got) == set(want)
    diff = sorted(k for k in want if got[k] != want[k])
    assert not diff, f"{len(diff)} of {len(want)} groups differ: {diff[:10]}"
