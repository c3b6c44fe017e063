"""How the pooled embeddings of the DLRM-DCNv2 preset compress against the classic preset's.

For each preset's synthetic batch and freshly initialised tables (reference DLRM init,
``Uniform(-1/sqrt(rows), 1/sqrt(rows))``), every table's pooled embeddings are cut as the
embedding all-to-all cuts them: ``batch / devices`` rows per (table, peer) chunk. Per table it
reports the distinct pooled rows per chunk (what the dictionary form can exploit), the value
range of a chunk (what the REL bound scales with) and the compression ratio (raw / frame
bytes) of each codec form at one REL error bound. The multi-hot data follows MLPerf's rule
(``synthetic.mlperf_bags``) or, for contrast, independent Zipf ids per bag.

Usage::

    python -m bench.codecs.dcn_pooled_stats --out bench/results/dcn_pooled_stats.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json

import jax.numpy as jnp
import numpy as np

import jax_lossy_comm as jlc
from models.dlrm.configs import get_config
from models.dlrm.data import synthetic

CODECS = ("auto", "dedup", "entropy", "fixed")


def pooled(config, batch: int, rule: str, seed: int = 0) -> list[np.ndarray]:
    """float32[batch, dim] pooled embeddings of every table (sum over the bag)."""
    rows = config.table_rows()
    gen = synthetic.SyntheticCriteo(rows, bag_sizes=config.bag_sizes(), multi_hot_rule=rule,
                                    seed=seed)  # fmt: skip
    ids = gen.batch(0, batch)["ids"]
    rng = np.random.default_rng(seed)
    out = []
    for t, r in enumerate(rows):
        bag = ids[:, t]
        uniq, inv = np.unique(bag[bag >= 0], return_inverse=True)  # only the rows looked up
        vecs = rng.uniform(-1, 1, (len(uniq), config.embedding_dim)).astype(np.float32)
        vecs /= np.float32(np.sqrt(r))
        full = np.zeros(bag.shape + (config.embedding_dim,), np.float32)
        full[bag >= 0] = vecs[inv]
        out.append(full.sum(axis=1))
    return out


def table_stats(x: np.ndarray, devices: int, eb: float) -> dict:
    """Per-chunk statistics of one table's pooled embeddings ``float32[batch, dim]``."""
    chunks = x.reshape(devices, -1, x.shape[1])  # [peers, rows, dim]
    distinct = [len(np.unique(c, axis=0)) for c in chunks]
    rng = chunks.max(axis=(1, 2)) - chunks.min(axis=(1, 2))
    res = {
        "rows_per_chunk": chunks.shape[1],
        "distinct_rows_per_chunk": float(np.mean(distinct)),
        "value_range": float(np.mean(rng)),
    }
    raw = chunks[0].nbytes
    for codec in CODECS:
        _, nbytes = jlc.compress(jnp.asarray(chunks), eb, codec=codec, min_error_bound=eb)
        res[f"ratio_{codec}"] = float(raw / np.mean(np.abs(np.asarray(nbytes))))
    return res


def measure(name, config, rule, batch, devices, eb) -> dict:
    tables = [table_stats(x, devices, eb) for x in pooled(config, batch, rule)]
    agg = {
        "preset": name,
        "rule": rule,
        "bag_sizes": list(config.bag_sizes()),
        "embedding_dim": config.embedding_dim,
        "tables": tables,
    }
    for k in tables[0]:
        if k.startswith("ratio_"):  # over all tables: raw / sum of frames
            agg[k] = len(tables) / sum(1.0 / t[k] for t in tables)
    agg["distinct_fraction"] = float(
        np.mean([t["distinct_rows_per_chunk"] / t["rows_per_chunk"] for t in tables])
    )
    return agg


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batch", type=int, default=1024, help="global batch")
    p.add_argument("--devices", type=int, default=8, help="peers of the all-to-all")
    p.add_argument("--error-bound", type=float, default=0.03, help="REL error bound")
    p.add_argument("--out", default="", help="JSON file for the results")
    a = p.parse_args(argv)
    small = get_config("dcnv2_small")
    runs = [
        ("kaggle", get_config("kaggle"), "independent"),
        ("dcnv2_small (one-hot)", dataclasses.replace(small, synthetic_multi_hot_sizes=()), "mlperf"),
        ("dcnv2_small", small, "mlperf"),
        ("dcnv2_small", small, "independent"),
    ]  # fmt: skip
    results = [measure(n, c, r, a.batch, a.devices, a.error_bound) for n, c, r in runs]
    print(f"batch {a.batch} over {a.devices} peers ({a.batch // a.devices} rows per chunk), "
          f"REL {a.error_bound}")  # fmt: skip
    print(f"{'preset':24} {'rule':12} distinct  " + "  ".join(f"{c:>8}" for c in CODECS))
    for r in results:
        print(f"{r['preset']:24} {r['rule']:12} {r['distinct_fraction']:8.3f}  "
              + "  ".join(f"{r[f'ratio_{c}']:8.1f}" for c in CODECS))  # fmt: skip
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"params": vars(a), "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
