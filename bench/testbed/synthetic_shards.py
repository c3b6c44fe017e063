"""The shared data of a testbed run: synthetic rows of the library's generator as binary shards.

``write_synthetic_shards`` writes them once (``DIR/train``, ``DIR/eval``; a folder that already
holds the same rows is kept): rows of ``models.dlrm.data.synthetic`` as Criteo text
(``synthetic_text``), converted by ``models.dlrm.data.preprocess``, so that the library's
trainer (``--data``) and the TorchRec peer (``torchrec_data.ShardReader``) read the same rows.
Used by ``bench.testbed.netns_bench`` (``--shards``, the torchrec-* modes).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np

_MADE = "synthetic.json"  # what a shard folder of write_synthetic_shards holds


def synthetic_text(gen, rows: int, stream: str, chunk: int = 8192) -> bytes:
    """``rows`` rows of a ``models.dlrm.data.synthetic.SyntheticCriteo`` stream as Criteo text
    (label, 13 integer counts, 26 8-hex-digit ids, tab-separated): the counts are the
    generator's (``expm1`` of its ``log1p`` features, rounded), the ids its ids (a bag's
    first id with multi-hot bags), so ``models.dlrm.data.preprocess`` gives back the generator's
    rows (their one-hot part)."""
    lines = []
    for i in range((rows + chunk - 1) // chunk):
        b = gen.batch(i, min(chunk, rows - i * chunk), stream)
        counts = np.rint(np.expm1(b["dense"].astype(np.float64))).astype(np.int64)
        for lab, c, ids in zip(b["label"], counts, b["ids"][:, :, 0]):
            lines.append("\t".join([str(int(lab)), *map(str, c), *(f"{int(x):08x}" for x in ids)]))
    return ("\n".join(lines) + "\n").encode()


def write_synthetic_shards(
    directory: str | os.PathLike[str], config, train_rows: int, eval_rows: int
) -> dict[str, str]:
    """Writes the shared data of a benchmark once: ``directory/train`` (``train_rows`` rows
    of the synthetic generator's training stream) and ``directory/eval`` (``eval_rows`` rows
    of its evaluation stream), binary shards of ``models.dlrm.data.preprocess`` hashed into
    ``config.table_rows()``, of the generator the trainer's built-in data uses for ``config``
    (``models.dlrm.data.sources.synthetic_generator``: its seed, Zipf exponent, bags and teacher;
    drawn in chunks of ``synthetic_text``, not the trainer's batches). Multi-hot
    bags (``config.bag_sizes()`` > 1, MLPerf's rule) are written as the generator makes them:
    the text carries each bag's first id, ``models.dlrm.data.shards.write_multi_hot`` adds the
    ids fixed per that id (``sum(bag_sizes)`` ids per row, no padding). Folders that already
    hold a finished conversion of the same rows are kept.

    Returns:
      ``{"train": path, "eval": path}``.

    Raises:
      ValueError: multi-hot bags under the ``independent`` rule (their other ids are drawn,
        not a function of the first, so the shard format cannot carry them from text).
    """
    from models.dlrm.data import preprocess, shards
    from models.dlrm.data import sources as data

    rows, bags = config.table_rows(), config.bag_sizes()
    multi_hot = max(bags) > 1
    if multi_hot and config.synthetic_multi_hot_rule != "mlperf":
        raise ValueError(
            "shards of multi-hot bags need synthetic_multi_hot_rule 'mlperf', the config has "
            f"{config.synthetic_multi_hot_rule!r}"
        )
    gen = data.synthetic_generator(config)
    out = {}
    for name, n, stream in (("train", train_rows, "train"), ("eval", eval_rows, "eval")):
        d = Path(directory) / name
        out[name] = str(d)
        made = {"generator": "models.dlrm.data.synthetic.SyntheticCriteo", "stream": stream,
                "rows": n, "seed": config.seed, "table_rows": list(rows),
                "zipf_a": config.synthetic_zipf_a, "bag_sizes": list(bags),
                "multi_hot_rule": config.synthetic_multi_hot_rule}  # fmt: skip
        try:
            if json.loads((d / _MADE).read_text()) == made:
                preprocess.verify_shards(str(d), preprocess.read_manifest(str(d)), checksums=False)
                continue
        except (OSError, ValueError):
            pass
        shutil.rmtree(d, ignore_errors=True)
        one_hot = d.with_name(f"{name}_one_hot") if multi_hot else d
        shutil.rmtree(one_hot, ignore_errors=True)
        one_hot.mkdir(parents=True)
        text = one_hot / f"{name}.txt"
        text.write_bytes(synthetic_text(gen, n, stream))
        preprocess.convert(
            [str(text)], str(one_hot), data_format="terabyte", table_rows=rows, progress=False
        )
        text.unlink()
        if multi_hot:
            shards.write_multi_hot(str(one_hot), str(d), bags, seed=config.seed)
            shutil.rmtree(one_hot)
        (d / _MADE).write_text(json.dumps(made))
    return out
