"""TorchRec's DLRM on the CPU as a peer of the library's trainer.

One process of a 2-process TorchRec run: ``torchrec.models.dlrm.DLRM`` (or ``DLRM_DCN``) under
``DistributedModelParallel`` with table-wise sharding (the planner's only allowed sharding
type; each rank is its own host: ``local_world_size=1``), ``torch.distributed`` with gloo on
the CPU, and the pooled-embedding all-to-all in fp32 or through TorchRec's quantized comms
(``QCommsConfig``: FP16, BF16, INT8 forward; FBGEMM's codecs; BF16 really BF16, see
``qcomm_registry``). The model, batch, optimizer
and data are the library trainer's (``python -m models.dlrm.main``) for the same preset:

* tables, embedding dim, bottom and top MLP, global batch, learning rate, seed and shard
  settings come from ``--config`` (a JSON that ``bench.netns_bench`` writes once from the
  preset's ``Config``; see ``peer_config``);
* MLP init as the library's model (Glorot normal kernels, N(0, sqrt(1/fan_out)) biases);
  tables uniform(-1/sqrt(rows), 1/sqrt(rows)) (TorchRec's default, as the library's);
* SGD: the dense part through DDP (which averages the ranks' gradients: the gradient of the
  global mean loss) and the tables by FBGEMM's fused exact SGD in the backward pass at
  ``lr / world_size`` (each rank's loss is the mean over its local batch, so its row
  gradients are ``world_size`` times those of the global mean loss the library uses);
* batches from the same shard folders (``--data``, ``--eval-data``, written once by the
  benchmark with ``models.dlrm.preprocess``), memory-mapped per their manifest
  (``ShardReader``: the rows per step and process of the trainer's ``ShardStream`` in file
  order, ``--shuffle-block-rows 0``, which the benchmark passes to the trainer);
  evaluation logits of the same held-out rows are saved (``eval_logits.npz``) and the
  benchmark computes AUC and log loss from them with the trainer's ``compute_metrics``.

Gloo's address: ``torch.distributed`` binds the address of ``GLOO_SOCKET_IFNAME`` (set by the
benchmark to the namespace's veth) and the rendezvous is ``MASTER_ADDR:MASTER_PORT``.

Output (rank 0): ``--out`` JSON with ``status``, ``intervals`` (per ``--log-every`` steps:
``step``, ``seconds``, ``unix_time``, ``samples_per_s``, ``loss``), ``final_step``,
``qcomm`` (requested and effective precisions), versions; ``eval_logits.npz`` beside it.

Environment (its own venv, never a dependency of the library; the commands the benchmark
documents, from the repository root)::

    python3 -m venv /work/torchrec-venv
    /work/torchrec-venv/bin/pip install torch==2.14.1
    /work/torchrec-venv/bin/pip install fbgemm-gpu-cpu==1.9.0
    /work/torchrec-venv/bin/pip install --no-deps torchrec==1.9.2
    /work/torchrec-venv/bin/pip install tensordict torchmetrics==1.0.3 pyre-extensions \\
        iopath numpy scikit-learn pyarrow

Run by ``python -m bench.netns_bench --modes torchrec-fp32 ... --torchrec-python
/work/torchrec-venv/bin/python`` (it spawns both ranks inside the testbed's namespaces).

References:
  Naumov et al., arXiv 1906.00091 (DLRM); Wang et al., arXiv 2008.13535 (DCN-V2);
  meta-pytorch/torchrec ``torchrec/distributed/fbgemm_qcomm_codec.py`` (QCommsConfig).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

#: ``--qcomm`` name -> (forward, backward) TorchRec CommType names. INT8 is forward only in
#: TorchRec's codec (a quantized backward of row-wise int8 is not offered); its backward is
#: BF16, as TorchRec's own tests pair them.
QCOMMS = {
    "fp32": ("FP32", "FP32"),
    "fp16": ("FP16", "FP16"),
    "bf16": ("BF16", "BF16"),
    "int8": ("INT8", "BF16"),
}
MODELS = ("dlrm", "dlrm-dcn")
#: DLRM-DCN's cross network (TorchRec's ``DLRM_DCN`` defaults in its examples).
DCN_NUM_LAYERS, DCN_LOW_RANK_DIM = 3, 512


# ----------------------------------------------------------------------------------- data
def peer_config(config: Any) -> dict[str, Any]:
    """What the peer needs of the library trainer's ``Config`` (JSON-able): table rows,
    dims, MLPs, batch, optimizer, seed, evaluation rows.

    Raises:
      ValueError: a setting the peer does not reproduce (not SGD, multi-hot, a learning-rate
        schedule, a dtype other than float32).
    """
    if config.optimizer != "sgd":
        raise ValueError(f"the TorchRec peer runs SGD only, the config has {config.optimizer!r}")
    if config.warmup_steps or config.decay_steps or config.decay_start_step:
        raise ValueError("the TorchRec peer has no learning-rate schedule: warmup/decay must be 0")
    if config.embedding_dtype != "float32":
        raise ValueError(f"embedding_dtype must be float32, got {config.embedding_dtype!r}")
    return {
        "table_rows": list(config.table_rows()),
        "embedding_dim": config.embedding_dim,
        "bottom_mlp": list(config.bottom_mlp),
        "top_mlp": list(config.top_mlp),
        "num_dense": config.num_dense,
        "batch_size": config.batch_size,
        "eval_batch_size": config.eval_batch_size,
        "eval_rows": config.eval_rows,
        "learning_rate": config.learning_rate,
        "seed": config.seed,
    }


def kjt_arrays(ids: np.ndarray) -> tuple[list[str], np.ndarray, np.ndarray]:
    """A batch's ids as the flat arrays of a TorchRec ``KeyedJaggedTensor``.

    Args:
      ids: int32[b, T, 1], one id per (row, table), as ``ShardStream`` gives them.

    Returns:
      ``(keys, values, lengths)``: keys ``f0 .. f{T-1}`` (feature t = table t), values
      int64[T * b] key-major (all rows of feature 0, then feature 1, ...), lengths
      int32[T * b] (ones: one id per bag).

    Raises:
      ValueError: ``ids`` is not ``[b, T, 1]``.
    """
    if ids.ndim != 3 or ids.shape[2] != 1:
        raise ValueError(f"ids must be [batch, tables, 1] (one-hot), got shape {ids.shape}")
    b, t, _ = ids.shape
    values = np.ascontiguousarray(ids[:, :, 0].T, dtype=np.int64).reshape(-1)
    return [f"f{i}" for i in range(t)], values, np.ones(t * b, np.int32)


SHARD_FORMAT, SHARD_VERSION = "jax_lossy_comm.criteo_shards", 1


class ShardReader:
    """The rows of a shard folder (``models.dlrm.preprocess``), memory-mapped per its
    ``manifest.json`` with numpy alone (the TorchRec venv needs nothing of the library's).

    Rows are read in file order, as the library trainer's ``ShardStream`` reads them with
    ``--shuffle-block-rows 0`` and no held-out rows (``--eval-data`` given): global batch
    ``g`` is stream positions ``[g * B, (g + 1) * B)`` modulo the rows (epochs wrap), process
    ``p`` takes ``[g * B + p * b, g * B + (p + 1) * b)`` (``b = B / processes``).

    Args:
      directory: the shard folder.

    Raises:
      FileNotFoundError: no manifest.
      ValueError: another format or version, an unfinished conversion, no rows, or a file
        whose size differs from the manifest's.
    """

    def __init__(self, directory: str):
        man = json.loads((Path(directory) / "manifest.json").read_text())
        if man.get("format") != SHARD_FORMAT or man.get("version") != SHARD_VERSION:
            raise ValueError(
                f"{directory}: not a {SHARD_FORMAT} version {SHARD_VERSION} folder "
                f"(format {man.get('format')!r}, version {man.get('version')!r})"
            )
        if not man.get("complete"):
            raise ValueError(f"{directory}: the conversion has not finished")
        shards = [s for s in man["shards"] if s["rows"] > 0]
        if not shards:
            raise ValueError(f"{directory}: no rows")
        self.table_rows = tuple(man["settings"]["table_rows"])
        self.starts = np.cumsum([0] + [s["rows"] for s in shards]).astype(np.int64)
        self.num_rows = int(self.starts[-1])
        self.maps: dict[str, list[np.ndarray]] = {}
        for name, col in man["columns"].items():
            self.maps[name] = []
            for s in shards:
                f = Path(directory) / s["files"][name]["file"]
                want = s["rows"] * col["per_row"] * np.dtype(col["dtype"]).itemsize
                if f.stat().st_size != want:
                    raise ValueError(f"{f}: {f.stat().st_size} bytes, the manifest needs {want}")
                shape = (s["rows"], col["per_row"])
                self.maps[name].append(np.memmap(f, dtype=col["dtype"], mode="r", shape=shape))

    def rows(self, start: int, stop: int) -> dict[str, np.ndarray]:
        """Rows ``[start, stop)`` as the trainer's batch dict: ``dense`` float32[n, 13],
        ``ids`` int32[n, 26, 1], ``label`` float32[n]; positions past the end wrap."""
        idx = np.arange(start, stop, dtype=np.int64) % self.num_rows
        shard = np.searchsorted(self.starts, idx, side="right") - 1
        out = {}
        for name, maps in self.maps.items():
            out[name] = np.empty((len(idx), maps[0].shape[1]), maps[0].dtype)
            for k in np.unique(shard):
                at = shard == k
                out[name][at] = maps[k][idx[at] - self.starts[k]]
        return {"dense": out["dense"], "ids": out["ids"][:, :, None], "label": out["label"][:, 0]}

    def batch(self, index: int, global_batch: int, rank: int, world_size: int):
        """Process ``rank``'s share of global batch ``index`` (see the class doc)."""
        b = global_batch // world_size
        start = index * global_batch + rank * b
        return self.rows(start, start + b)


# ---------------------------------------------------------------------------------- model
def _init_mlps(module, seed: int) -> None:
    """Re-initializes every ``nn.Linear`` of ``module`` as the library's MLPs (Glorot normal
    kernel, bias N(0, sqrt(1 / fan_out))), seeded (the same on every rank)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    for m in module.modules():
        if isinstance(m, torch.nn.Linear):
            fan_out, fan_in = m.weight.shape
            with torch.no_grad():
                std = (2.0 / (fan_in + fan_out)) ** 0.5
                m.weight.copy_(torch.randn(m.weight.shape, generator=g) * std)
                m.bias.copy_(torch.randn(m.bias.shape, generator=g) * (1.0 / fan_out) ** 0.5)


def qcomm_registry(qcomm: str):
    """TorchRec's codec registry for ``--qcomm`` (None for fp32) and the effective
    (forward, backward) precisions of the pooled all-to-all.

    Built as ``get_qcomm_codecs_registry`` builds it (one ``get_qcomm_codecs`` per comm op,
    same ``QCommsConfig``) but without its CPU rule, which replaces BF16 by FP16 on a CPU
    device ("not supported on GLOO"): gloo's ``all_to_all_single`` in torch 2.14 carries
    bfloat16 (checked on 2 processes), so ``bf16`` runs the BF16 codec it names.
    """
    from torchrec.distributed.fbgemm_qcomm_codec import CommType, QCommsConfig, get_qcomm_codecs
    from torchrec.distributed.types import CommOp

    fwd, bwd = QCOMMS[qcomm]
    if (fwd, bwd) == ("FP32", "FP32"):
        return None, ("FP32", "FP32")
    cfg = QCommsConfig(forward_precision=CommType[fwd], backward_precision=CommType[bwd])
    ops = (
        CommOp.POOLED_EMBEDDINGS_ALL_TO_ALL,
        CommOp.POOLED_EMBEDDINGS_REDUCE_SCATTER,
        CommOp.SEQUENCE_EMBEDDINGS_ALL_TO_ALL,
    )
    reg = {op.name: get_qcomm_codecs(cfg) for op in ops}
    codecs = reg["POOLED_EMBEDDINGS_ALL_TO_ALL"]
    eff = tuple(str(c._comm_precision.name) for c in (codecs.forward, codecs.backward))
    return reg, eff


def build(cfg: dict[str, Any], model: str, qcomm: str, world_size: int):
    """The sharded model and the dense optimizer; returns ``(dmp, dense_opt, info)``."""
    import torch
    from torch.distributed.optim import _apply_optimizer_in_backward
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.model_parallel import DistributedModelParallel
    from torchrec.distributed.planner import EmbeddingShardingPlanner, Topology
    from torchrec.distributed.planner.types import ParameterConstraints
    from torchrec.distributed.types import ShardingType
    from torchrec.models.dlrm import DLRM, DLRM_DCN
    from torchrec.modules.embedding_configs import EmbeddingBagConfig
    from torchrec.modules.embedding_modules import EmbeddingBagCollection
    from torchrec.optim.optimizers import in_backward_optimizer_filter

    tables = [
        EmbeddingBagConfig(
            name=f"t{i}",
            embedding_dim=cfg["embedding_dim"],
            num_embeddings=rows,
            feature_names=[f"f{i}"],
        )
        for i, rows in enumerate(cfg["table_rows"])
    ]
    torch.manual_seed(cfg["seed"])
    ebc = EmbeddingBagCollection(tables=tables, device=torch.device("meta"))
    common = dict(
        embedding_bag_collection=ebc,
        dense_in_features=cfg["num_dense"],
        dense_arch_layer_sizes=list(cfg["bottom_mlp"]),
        over_arch_layer_sizes=list(cfg["top_mlp"]),
        dense_device=torch.device("cpu"),
    )
    if model == "dlrm":
        net = DLRM(**common)
    else:
        net = DLRM_DCN(**common, dcn_num_layers=DCN_NUM_LAYERS, dcn_low_rank_dim=DCN_LOW_RANK_DIM)
    _init_mlps(net.dense_arch, cfg["seed"])
    _init_mlps(net.over_arch, cfg["seed"] + 1)
    lr = float(cfg["learning_rate"])
    _apply_optimizer_in_backward(
        torch.optim.SGD, net.sparse_arch.parameters(), {"lr": lr / world_size}
    )
    registry, effective = qcomm_registry(qcomm)
    sharder = EmbeddingBagCollectionSharder(qcomm_codecs_registry=registry)
    planner = EmbeddingShardingPlanner(
        topology=Topology(world_size=world_size, compute_device="cpu", local_world_size=1),
        constraints={
            t.name: ParameterConstraints(sharding_types=[ShardingType.TABLE_WISE.value])
            for t in tables
        },
    )
    import torch.distributed as dist

    plan = planner.collective_plan(net, [sharder], dist.GroupMember.WORLD)
    dmp = DistributedModelParallel(
        module=net, device=torch.device("cpu"), plan=plan, sharders=[sharder]
    )
    dense = dict(in_backward_optimizer_filter(dmp.named_parameters()))
    opt = torch.optim.SGD(list(dense.values()), lr=lr)
    owners: dict[str, int] = {}
    for _, mod_plan in plan.plan.items():
        for name, ps in mod_plan.items():
            owners[name] = int(ps.ranks[0]) if ps.ranks else -1
    info = {
        "qcomm_requested": QCOMMS[qcomm],
        "qcomm_effective": effective,
        "table_owner_rank": owners,
        "sharding_types": sorted(
            {ps.sharding_type for m in plan.plan.values() for ps in m.values()}
        ),
        "compute_kernels": sorted(
            {ps.compute_kernel for m in plan.plan.values() for ps in m.values()}
        ),
    }
    return dmp, opt, info


def _batch_tensors(batch: dict[str, np.ndarray]):
    import torch
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    keys, values, lengths = kjt_arrays(batch["ids"])
    kjt = KeyedJaggedTensor.from_lengths_sync(
        keys=keys, values=torch.from_numpy(values), lengths=torch.from_numpy(lengths)
    )
    return (
        torch.from_numpy(np.ascontiguousarray(batch["dense"])),
        kjt,
        torch.from_numpy(np.ascontiguousarray(batch["label"], np.float32)),
    )


def evaluate(dmp, eval_set: dict[str, np.ndarray], eval_batch: int, rank: int, world_size: int):
    """Logits of every evaluation row (rank 0 gets them all, in row order; others None).

    Each global evaluation batch is split into equal rank shares (the last one padded with
    its last row; padding dropped), as the library trainer's ``evaluate`` does.
    """
    import torch
    import torch.distributed as dist

    n = len(eval_set["label"])
    out = []
    dmp.eval()
    with torch.no_grad():
        for lo in range(0, n, eval_batch):
            chunk = {k: v[lo : lo + eval_batch] for k, v in eval_set.items()}
            m = len(chunk["label"])
            if m < eval_batch:
                chunk = {
                    k: np.concatenate([v, np.repeat(v[-1:], eval_batch - m, 0)])
                    for k, v in chunk.items()
                }
            lb = eval_batch // world_size
            local = {k: v[rank * lb : (rank + 1) * lb] for k, v in chunk.items()}
            dense, kjt, _ = _batch_tensors(local)
            logits = dmp(dense_features=dense, sparse_features=kjt).reshape(-1).contiguous()
            parts = [torch.empty_like(logits) for _ in range(world_size)]
            dist.all_gather(parts, logits)
            out.append(torch.cat(parts).numpy()[:m])
    dmp.train()
    return np.concatenate(out) if rank == 0 else None


def train(args) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    cfg = json.loads(Path(args.config).read_text())
    dist.init_process_group("gloo", rank=args.rank, world_size=args.world_size)
    try:
        dmp, opt, info = build(cfg, args.model, args.qcomm, args.world_size)
        data = ShardReader(args.data)
        if data.table_rows != tuple(cfg["table_rows"]):
            raise ValueError(
                f"{args.data} holds ids hashed into {list(data.table_rows)} rows, the config "
                f"has {cfg['table_rows']}"
            )
        ev = ShardReader(args.eval_data)
        eval_set = ev.rows(0, min(cfg["eval_rows"], ev.num_rows))  # the trainer's eval_set
        loss_fn = torch.nn.BCEWithLogitsLoss()
        gb = cfg["batch_size"]
        intervals, losses, seen = [], [], []
        t0 = time.perf_counter()
        for step in range(1, args.steps + 1):
            batch = data.batch(step - 1, gb, args.rank, args.world_size)
            dense, kjt, label = _batch_tensors(batch)
            logits = dmp(dense_features=dense, sparse_features=kjt).reshape(-1)
            loss = loss_fn(logits, label)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
            seen.append((batch["label"], logits.detach().numpy()))
            if step % args.log_every == 0 or step == args.steps:
                dist.barrier()  # the interval ends when both ranks finished its steps
                seconds = time.perf_counter() - t0
                n = len(losses)
                intervals.append(
                    {
                        "step": step,
                        "seconds": seconds,
                        "unix_time": time.time(),
                        "samples_per_s": gb * n / seconds,
                        "loss": float(np.mean(losses)),
                        # this rank's training rows of the interval (the trainer's record
                        # has the AUC of all rows)
                        "rank_train_auc": _auc(*map(np.concatenate, zip(*seen))),
                    }
                )
                if args.rank == 0:
                    print(f"step {step}: loss {intervals[-1]['loss']:.5f} "
                          f"{intervals[-1]['samples_per_s']:.0f} samples/s", flush=True)  # fmt: skip
                losses, seen, t0 = [], [], time.perf_counter()
        logits = evaluate(dmp, eval_set, cfg["eval_batch_size"], args.rank, args.world_size)
        if not np.isfinite(np.asarray(intervals[-1]["loss"])):
            raise RuntimeError(f"TorchRec training diverged (loss {intervals[-1]['loss']})")
    finally:
        dist.destroy_process_group()
    out = {
        "status": "ok",
        "model": args.model,
        "qcomm": args.qcomm,
        "global_batch": gb,
        "intervals": intervals,
        "final_step": args.steps,
        "gloo_socket_ifname": os.environ.get("GLOO_SOCKET_IFNAME"),
        "master": f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}",
        "torch_num_threads": torch.get_num_threads(),
        "versions": _versions(),
        "python": platform.python_version(),
        **info,
    }
    if args.rank == 0:
        np.savez(
            Path(args.out).with_name("eval_logits.npz"), logits=logits, label=eval_set["label"]
        )
    return out


def _auc(labels: np.ndarray, logits: np.ndarray) -> float:
    """ROC AUC (scikit-learn), NaN with one class only."""
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(labels, logits)) if 0 < labels.sum() < len(labels) else float("nan")


def _versions() -> dict[str, str | None]:
    import importlib.metadata as md

    out = {}
    for name in ("torch", "torchrec", "fbgemm-gpu-cpu", "numpy"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.torchrec_peer", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--data", required=True, help="training shard folder")
    ap.add_argument("--eval-data", required=True, help="evaluation shard folder")
    ap.add_argument("--config", required=True, help="peer config JSON (bench.netns_bench)")
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--model", choices=MODELS, default="dlrm")
    ap.add_argument("--qcomm", choices=list(QCOMMS), default="fp32")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--log-every", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--out", required=True, help="result JSON (written by rank 0)")
    args = ap.parse_args(argv)
    for name in ("steps", "log_every", "world_size"):
        if getattr(args, name) <= 0:
            ap.error(f"--{name.replace('_', '-')} must be > 0")
    if not 0 <= args.rank < args.world_size:
        ap.error(f"--rank must be in [0, {args.world_size}), got {args.rank}")
    for var in ("MASTER_ADDR", "MASTER_PORT"):
        if var not in os.environ:
            ap.error(f"environment variable {var} is not set (the rendezvous address)")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    try:
        res = train(args)
    except Exception as e:  # noqa: BLE001 - the benchmark reads the reason from the JSON
        res = {"status": "error", "error": f"{type(e).__name__}: {e}"[:2000], "qcomm": args.qcomm}
        if args.rank == 0:
            Path(args.out).write_text(json.dumps(res))
        raise
    if args.rank == 0:
        Path(args.out).write_text(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
