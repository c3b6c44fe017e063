"""TorchRec's DLRM on the CPU as a peer of the library's trainer.

One process of a 2-process TorchRec run: ``torchrec.models.dlrm.DLRM`` (or ``DLRM_DCN``) under
``DistributedModelParallel`` with table-wise sharding (the planner's only allowed sharding
type; each rank is its own host: ``local_world_size=1``), ``torch.distributed`` with gloo on
the CPU, and the pooled-embedding all-to-all in fp32 or through TorchRec's quantized comms
(``QCommsConfig``: FP16, BF16, INT8 forward, FP8 row-wise, MX4; FBGEMM's codecs; BF16 really
BF16, see ``qcomm_registry``). FBGEMM 1.9.0 has no CPU kernel of FP8 row-wise ("fp8 is not
supported by CPU"): that mode fails on the CPU and the benchmark records the error. The
model, batch, optimizer and data are the library trainer's (``python -m models.dlrm.main``)
for the same preset:

* tables, bags, embedding dim, bottom and top MLP, interaction (dot for ``DLRM``; DCN-v2 for
  ``DLRM_DCN``, its ``dcn_num_layers`` / ``dcn_low_rank_dim``), global batch, optimizer,
  learning rate, seed and shard settings come from ``--config`` (a JSON that
  ``bench.testbed.netns_bench`` writes once from the preset's ``Config``; see ``peer_config``);
* multi-hot bags (``bag_sizes``, the shard's fixed ids per bag) as a ``KeyedJaggedTensor``
  with sum pooling (``EmbeddingBagConfig``'s default), as the library's pooled lookup;
* init as the library's model (Glorot normal, truncated at 2 sigma as Flax's, for MLP and
  cross kernels; MLP biases N(0, sqrt(1/fan_out)); cross biases 0); tables uniform(-1/sqrt(rows),
  1/sqrt(rows)) (TorchRec's default, as the library's); the distributions, not the numbers;
* SGD: the dense part through DDP (which averages the ranks' gradients: the gradient of the
  global mean loss) and the tables by FBGEMM's fused exact SGD in the backward pass at
  ``lr / world_size`` (each rank's loss is the mean over its local batch, so its row
  gradients are ``world_size`` times those of the global mean loss the library uses);
* Adagrad (the library's ``optax.adagrad``, accumulator 0, per element on the head and on
  the table rows): the dense part by ``LibraryAdagrad`` (optax's arithmetic: eps under the
  square root), the tables by FBGEMM's fused ``EXACT_ADAGRAD`` (per element, as optax on the
  rows; not ``EXACT_ROWWISE_ADAGRAD``, one accumulator per row) at the same lr (Adagrad is
  invariant to the gradient scale) with eps ``adagrad_eps * world_size`` (the scale);
  FBGEMM adds eps outside the square root, with no option otherwise: a table element's
  update is ``lr * g / (sqrt(acc) + eps)`` where the library's is ``lr * g / sqrt(acc +
  eps)``, the same to float32 rounding once ``sqrt(acc) >> sqrt(eps)`` (1e-5 at eps 1e-10);
  the optimizer read back from FBGEMM's modules is in the output (``table_optimizer``);
* batches from the same shard folders (``--data``, ``--eval-data``, written once by the
  benchmark with ``models.dlrm.data.preprocess``), memory-mapped per their manifest
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

Run by ``python -m bench.testbed.netns_bench --modes torchrec-fp32 ... --torchrec-python
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

from bench.training.torchrec_data import OPTIMIZERS, ShardReader, kjt_arrays
from bench.training.torchrec_init import LibraryAdagrad, init_like_library, table_optimizer

#: ``--qcomm`` name -> (forward, backward) TorchRec CommType names. INT8 is forward only in
#: TorchRec's codec (a quantized backward of row-wise int8 is not offered); its backward is
#: BF16, as TorchRec's own tests pair them.
QCOMMS = {
    "fp32": ("FP32", "FP32"),
    "fp16": ("FP16", "FP16"),
    "bf16": ("BF16", "BF16"),
    "int8": ("INT8", "BF16"),
    "fp8": ("FP8", "FP8"),
    "mx4": ("MX4", "MX4"),
}
#: ``--model`` -> the library's ``Config.interaction`` it reproduces (``DLRM``: dot
#: interaction; ``DLRM_DCN``: DCN-v2 low-rank cross network).
MODELS = {"dlrm": "dot", "dlrm-dcn": "dcn"}


def qcomm_registry(qcomm: str, embedding_dim: int):
    """TorchRec's codec registry for ``--qcomm`` (None for fp32) and the effective
    (forward, backward) precisions of the pooled all-to-all.

    FP8 is FBGEMM's row-wise FP8 (``FloatToFP8RowwiseQuantized``: e4m3 codes and a float32
    scale per row) with a row of ``embedding_dim`` values, one pooled vector
    (``QCommsConfig.fp8_quantize_dim``; unset, FBGEMM's CPU path calls a 2-D kernel on the
    flat buffer and fails). MX4 keeps FBGEMM's default group of 32 values per shared
    exponent (``mx4_quantize_dim`` unset).

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
    fp8_dim = embedding_dim if "FP8" in (fwd, bwd) else None
    cfg = QCommsConfig(
        forward_precision=CommType[fwd], backward_precision=CommType[bwd], fp8_quantize_dim=fp8_dim
    )
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
    interaction = cfg.get("interaction", "dot")
    if MODELS[model] != interaction:
        raise ValueError(
            f"--model {model} is the library's interaction {MODELS[model]!r}, the config has "
            f"{interaction!r} (torchrec-dcn-* modes need a dcn preset: dcnv2, dcnv2_small)"
        )
    if model == "dlrm":
        net = DLRM(**common)
    else:
        net = DLRM_DCN(
            **common,
            dcn_num_layers=int(cfg["dcn_num_layers"]),
            dcn_low_rank_dim=int(cfg["dcn_low_rank_dim"]),
        )
    init_like_library(net.dense_arch, cfg["seed"])
    init_like_library(net.inter_arch, cfg["seed"] + 2)
    init_like_library(net.over_arch, cfg["seed"] + 1)
    lr = float(cfg["learning_rate"])
    optimizer = cfg.get("optimizer", "sgd")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}, the config has {optimizer!r}")
    # A rank's loss is the mean over its local batch: its row gradients are world_size times
    # those of the global mean loss the library differentiates. SGD: lr / world_size. Adagrad
    # is invariant to the scale but for eps, which FBGEMM adds outside the root: eps scaled too.
    if optimizer == "sgd":
        table_opt, table_kw = torch.optim.SGD, {"lr": lr / world_size}
    else:  # FBGEMM EXACT_ADAGRAD: per element, as optax on the table rows
        eps = float(cfg["adagrad_eps"])
        table_opt, table_kw = torch.optim.Adagrad, {"lr": lr, "eps": eps * world_size}
    _apply_optimizer_in_backward(table_opt, net.sparse_arch.parameters(), table_kw)
    registry, effective = qcomm_registry(qcomm, int(cfg["embedding_dim"]))
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
    dense = list(dict(in_backward_optimizer_filter(dmp.named_parameters())).values())
    if optimizer == "sgd":
        opt = torch.optim.SGD(dense, lr=lr)
    else:
        opt = LibraryAdagrad(dense, lr, float(cfg["adagrad_eps"]))
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
        "dense_optimizer": type(opt).__name__,
        "table_optimizer": table_optimizer(dmp),
    }
    return dmp, opt, info


def _batch_tensors(batch: dict[str, np.ndarray], bag_sizes: Sequence[int]):
    import torch
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    keys, values, lengths = kjt_arrays(batch["ids"], bag_sizes)
    kjt = KeyedJaggedTensor.from_lengths_sync(
        keys=keys, values=torch.from_numpy(values), lengths=torch.from_numpy(lengths)
    )
    return (
        torch.from_numpy(np.ascontiguousarray(batch["dense"])),
        kjt,
        torch.from_numpy(np.ascontiguousarray(batch["label"], np.float32)),
    )


def evaluate(
    dmp, eval_set: dict[str, np.ndarray], bag_sizes, eval_batch: int, rank: int, world_size: int
):
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
            dense, kjt, _ = _batch_tensors(local, bag_sizes)
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
        if data.bag_sizes != tuple(cfg["bag_sizes"]):
            raise ValueError(
                f"{args.data} holds bags of {list(data.bag_sizes)} ids, the config has "
                f"{cfg['bag_sizes']}"
            )
        ev = ShardReader(args.eval_data)
        if ev.bag_sizes != data.bag_sizes:
            raise ValueError(f"{args.eval_data} holds bags of {list(ev.bag_sizes)} ids")
        eval_set = ev.rows(0, min(cfg["eval_rows"], ev.num_rows))  # the trainer's eval_set
        loss_fn = torch.nn.BCEWithLogitsLoss()
        gb = cfg["batch_size"]
        intervals, losses, seen = [], [], []
        t0 = time.perf_counter()
        for step in range(1, args.steps + 1):
            batch = data.batch(step - 1, gb, args.rank, args.world_size)
            dense, kjt, label = _batch_tensors(batch, data.bag_sizes)
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
        logits = evaluate(
            dmp, eval_set, data.bag_sizes, cfg["eval_batch_size"], args.rank, args.world_size
        )
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
        prog="python -m bench.training.torchrec_peer", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--data", required=True, help="training shard folder")
    ap.add_argument("--eval-data", required=True, help="evaluation shard folder")
    ap.add_argument("--config", required=True, help="peer config JSON (bench.testbed.netns_bench)")
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--model", choices=list(MODELS), default="dlrm")
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
