"""The inputs of the step-time model (:mod:`models.dlrm.cluster.step_time`): the DLRM's shapes
(``ModelSpec``), the devices and links (``Cluster``), a device's throughput (``Compute``) and the
codecs (``CodecSpec``, ``Codecs``), each checked on construction, and the model presets the
benchmarks project (``terabyte_spec``, ``mlperf_dcnv2_spec``).

Pure Python (no jax). Units: bytes, seconds, bytes/s and FLOP/s, per device unless named.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from models.dlrm.cluster.collective_cost import check_link

_GRAD_BYTES = 4  # float32 head gradients


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """The shapes of a DLRM that set a step's cost.

    Attributes:
      num_tables: embedding tables ``T``.
      embedding_dim: width of every embedding vector.
      global_batch: samples per step over all devices ``B``.
      bottom_mlp: bottom MLP widths after the ``num_dense`` inputs (the last = embedding_dim).
      top_mlp: top MLP widths after the interaction (the last = 1).
      num_dense: dense input features.
      bag_sizes: ids per bag of each table (multi-hot, sum pooling); None = one each.
      cross_layers: DCN-v2 low-rank cross layers (0 = the dot interaction).
      cross_rank: their rank.
      value_bytes: bytes per embedding value (4 float32, 2 bfloat16 / float16).
      optimizer: "sgd" or "adagrad".
      pad_tables: table slots rounded up to a multiple of the device count (the library's
        table-wise sharding); False: ``ceil(T / P)`` slots per device without padding rows.
    """

    num_tables: int
    embedding_dim: int
    global_batch: int
    bottom_mlp: tuple[int, ...]
    top_mlp: tuple[int, ...]
    num_dense: int = 13
    bag_sizes: tuple[int, ...] | None = None
    cross_layers: int = 0
    cross_rank: int = 0
    value_bytes: int = 4
    optimizer: str = "sgd"
    pad_tables: bool = True

    def __post_init__(self):
        if self.num_tables < 1 or self.embedding_dim < 1 or self.global_batch < 1:
            raise ValueError("num_tables, embedding_dim and global_batch must be >= 1")
        if self.bag_sizes is not None and len(self.bag_sizes) != self.num_tables:
            raise ValueError(
                f"bag_sizes has {len(self.bag_sizes)} entries for {self.num_tables} tables"
            )
        if self.optimizer not in ("sgd", "adagrad"):
            raise ValueError(f"optimizer must be 'sgd' or 'adagrad', got {self.optimizer!r}")
        if self.bottom_mlp and self.bottom_mlp[-1] != self.embedding_dim:
            raise ValueError("the bottom MLP's last width must equal embedding_dim")

    @classmethod
    def from_config(cls, config, *, bag_sizes: Sequence[int] | None = None) -> ModelSpec:
        """From a ``models.dlrm.configs.Config`` (read by attribute; nothing imported)."""
        bags = bag_sizes
        if bags is None and hasattr(config, "bag_sizes"):
            bags = config.bag_sizes()
            bags = None if set(bags) == {1} else bags
        elif bags is None and getattr(config, "synthetic_multi_hot", 1) != 1:
            bags = (config.synthetic_multi_hot,) * len(config.cardinalities)
        dcn = getattr(config, "interaction", "dot") == "dcn"
        return cls(
            num_tables=len(config.cardinalities),
            embedding_dim=config.embedding_dim,
            global_batch=config.batch_size,
            bottom_mlp=tuple(config.bottom_mlp),
            top_mlp=tuple(config.top_mlp),
            num_dense=config.num_dense,
            bag_sizes=None if bags is None else tuple(bags),
            value_bytes={"float32": 4, "bfloat16": 2, "float16": 2}[config.embedding_dtype],
            optimizer=config.optimizer,
            cross_layers=config.dcn_num_layers if dcn else 0,
            cross_rank=config.dcn_low_rank_dim if dcn else 0,
        )

    def table_slots(self, devices: int) -> int:
        """Table slots over ``devices`` (``T`` rounded up to a multiple of ``devices``)."""
        return math.ceil(self.num_tables / devices) * devices

    def exchange_bytes(self, devices: int) -> float:
        """``X``: bytes of one device's pooled embeddings, whole batch, its busiest share."""
        per_device = self.table_slots(devices) // devices
        return float(self.global_batch * per_device * self.embedding_dim * self.value_bytes)

    def mean_bag(self) -> float:
        return 1.0 if self.bag_sizes is None else sum(self.bag_sizes) / self.num_tables

    def interaction_width(self) -> int:
        """Features into the top MLP."""
        t1 = self.num_tables + 1
        if self.cross_layers:
            return t1 * self.embedding_dim
        return t1 * (t1 - 1) // 2 + self.embedding_dim

    def _mlp(self, widths: Sequence[int], fan_in: int) -> tuple[int, int]:
        params = macs = 0
        for w in widths:
            params += fan_in * w + w
            macs += fan_in * w
            fan_in = w
        return params, macs

    def _cross(self) -> tuple[int, int]:
        d = (self.num_tables + 1) * self.embedding_dim
        params = self.cross_layers * (2 * d * self.cross_rank + d)
        flops = self.cross_layers * (4 * d * self.cross_rank + 3 * d)
        return params, flops

    def dense_params(self) -> int:
        """Parameters of the data-parallel head (bottom MLP, cross layers, top MLP)."""
        bp, _ = self._mlp(self.bottom_mlp, self.num_dense)
        tp, _ = self._mlp(self.top_mlp, self.interaction_width())
        return bp + tp + self._cross()[0]

    def gradient_bytes(self) -> float:
        """``S``: float32 bytes of the head gradients (one device's all-reduce input)."""
        return float(self.dense_params() * _GRAD_BYTES)

    def forward_flops(self) -> tuple[float, float]:
        """Forward FLOPs per sample: (bottom MLP, interaction + top MLP)."""
        _, bm = self._mlp(self.bottom_mlp, self.num_dense)
        _, tm = self._mlp(self.top_mlp, self.interaction_width())
        if self.cross_layers:
            inter = self._cross()[1]
        else:
            inter = 2 * (self.num_tables + 1) ** 2 * self.embedding_dim
        return 2.0 * bm, 2.0 * tm + inter


@dataclasses.dataclass(frozen=True)
class Cluster:
    """Devices and links.

    Attributes:
      nodes: nodes ``N``.
      devices_per_node: devices per node ``G``.
      intra_bandwidth: bytes/s per device and direction inside a node (> 0).
      inter_bandwidth: bytes/s per device and direction between nodes (the node's NICs
        together: ``G`` times this).
      intra_latency: seconds per intra-node message.
      inter_latency: seconds per inter-node message.
      serial_devices: devices whose compute and codec work share one processor (1 on GPUs).
      intra_shared: one intra-node link shared by the node's devices (a host's loopback),
        not a link per device (NVLink / NVSwitch ports).
      tree_allreduce: the exact all-reduce may run as a tree when that is faster (NCCL);
        False: ring only (gloo).
      inter_burst_bytes: bytes per node that one collective's inter-node transfer passes at
        no cost: a rate limiter's token bucket (Linux ``tc tbf``'s ``burst``) that refills
        between the collectives of a step. 0 (the default): a plain link.
    """

    nodes: int
    devices_per_node: int
    intra_bandwidth: float
    inter_bandwidth: float
    intra_latency: float = 0.0
    inter_latency: float = 0.0
    serial_devices: float = 1.0
    intra_shared: bool = False
    tree_allreduce: bool = False
    inter_burst_bytes: float = 0.0

    def __post_init__(self):
        if self.nodes < 1 or self.devices_per_node < 1:
            raise ValueError("nodes and devices_per_node must be >= 1")
        check_link(self.intra_bandwidth, self.intra_latency)
        check_link(self.inter_bandwidth, self.inter_latency)
        if not self.inter_burst_bytes >= 0:
            raise ValueError(f"inter_burst_bytes must be >= 0, got {self.inter_burst_bytes}")
        if not self.serial_devices >= 1:
            raise ValueError(f"serial_devices must be >= 1, got {self.serial_devices}")

    @property
    def devices(self) -> int:
        return self.nodes * self.devices_per_node


@dataclasses.dataclass(frozen=True)
class Compute:
    """Throughput of one device (one processor if ``Cluster.serial_devices`` > 1).

    Attributes:
      flops_per_s: dense (MLP) FLOP/s achieved.
      memory_bytes_per_s: bytes/s of embedding-row gathers and updates.
      device_overhead_s: seconds per device and step that no FLOP or byte accounts for: the
        dispatch of the device's program and the rendezvous of its collectives. Runs on the
        device's processor, so ``Cluster.serial_devices`` devices pay it one after the other.
        0 (the default) leaves it out, as for a GPU whose launches hide behind its work.
    """

    flops_per_s: float
    memory_bytes_per_s: float
    device_overhead_s: float = 0.0

    def __post_init__(self):
        if not (self.flops_per_s > 0 and self.memory_bytes_per_s > 0):
            raise ValueError("flops_per_s and memory_bytes_per_s must be > 0")
        if not self.device_overhead_s >= 0:
            raise ValueError(f"device_overhead_s must be >= 0, got {self.device_overhead_s}")

    def scaled(self, factor: float) -> Compute:
        """The same device at ``factor`` times the throughput (the overhead unchanged)."""
        return dataclasses.replace(
            self,
            flops_per_s=self.flops_per_s * factor,
            memory_bytes_per_s=self.memory_bytes_per_s * factor,
        )


@dataclasses.dataclass(frozen=True)
class CodecSpec:
    """One codec: throughput of raw bytes and its compression ratio (raw / wire bytes).

    Attributes:
      compress_bytes_per_s: raw bytes compressed per second on one device (``math.inf``: free).
      decompress_bytes_per_s: raw bytes decompressed per second.
      ratio: raw / wire bytes (>= 1 for a codec that shrinks; any > 0 accepted).
    """

    compress_bytes_per_s: float
    decompress_bytes_per_s: float
    ratio: float

    def __post_init__(self):
        if not (self.compress_bytes_per_s > 0 and self.decompress_bytes_per_s > 0):
            raise ValueError("codec throughputs must be > 0 bytes/s")
        if not self.ratio > 0:
            raise ValueError(f"ratio must be > 0, got {self.ratio}")

    def cost(self, compress_bytes: float, decompress_bytes: float) -> tuple[float, float]:
        return (
            compress_bytes / self.compress_bytes_per_s,
            decompress_bytes / self.decompress_bytes_per_s,
        )


@dataclasses.dataclass(frozen=True)
class Codecs:
    """The codecs of a run.

    Attributes:
      forward: the error-bounded exchange codec on pooled embeddings.
      gradient: the compressed all-reduce's codec on head gradients (``hierarchical-ar``).
      backward: the exchange codec on cotangents; None = ``forward``.
      cast_bytes_per_s: raw bytes/s of a fixed-precision cast (encode or decode), the
        ``fp16`` ... ``mx4`` modes.
      gradient_gather_ratio: the compressed all-reduce's all-gather ratio (its reduced sums are
        coded again, at a ratio of their own); None: ``gradient.ratio`` for both phases.
      exchange_overhead_s: seconds per device and step that a compressed exchange (``flat``,
        ``hierarchical``, ``hierarchical-ar``, ``flat-ar``) adds beyond its codec throughput:
        codec calls, frame packing, the overflow agreement's collective; once a step, the
        compressed all-reduce of the ``-ar`` modes included (``exact-ar`` pays none). Paid per
        device on its processor, like ``Compute.device_overhead_s``; 0 (the default) leaves it
        out.
    """

    forward: CodecSpec
    gradient: CodecSpec
    backward: CodecSpec | None = None
    cast_bytes_per_s: float = math.inf
    exchange_overhead_s: float = 0.0
    gradient_gather_ratio: float | None = None

    def __post_init__(self):
        if self.gradient_gather_ratio is not None and not self.gradient_gather_ratio > 0:
            raise ValueError(f"gradient_gather_ratio must be > 0, got {self.gradient_gather_ratio}")
        if not self.exchange_overhead_s >= 0:
            raise ValueError(f"exchange_overhead_s must be >= 0, got {self.exchange_overhead_s}")

    @property
    def bwd(self) -> CodecSpec:
        return self.forward if self.backward is None else self.backward


# ------------------------------------------------------------------------------ presets
#: The library's Terabyte preset (models/dlrm/configs/terabyte.py): 26 tables, dim 64.
TERABYTE_TABLES = 26


def terabyte_spec(global_batch: int = 2048) -> ModelSpec:
    """``models.dlrm.configs.terabyte``: dim 64, bottom 13-512-256-64, top 512-512-256-1,
    one-hot, SGD, float32 (``global_batch``: the preset's 2048 unless given)."""
    return ModelSpec(
        num_tables=TERABYTE_TABLES,
        embedding_dim=64,
        global_batch=global_batch,
        bottom_mlp=(512, 256, 64),
        top_mlp=(512, 512, 256, 1),
    )


#: MLPerf Training DLRM-DCNv2 multi-hot bag sizes (mlcommons/training recommendation_v2)
MLPERF_BAG_SIZES = (3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3)
MLPERF_BAG_SIZES = (*MLPERF_BAG_SIZES, 1, 1)
MLPERF_GLOBAL_BATCH = 55296


def mlperf_dcnv2_spec(global_batch: int = MLPERF_GLOBAL_BATCH) -> ModelSpec:
    """MLPerf Training DLRM-DCNv2 (mlcommons/training ``recommendation_v2/torchrec_dlrm``): 26
    tables of dim 128, bottom 13-512-256-128, 3 low-rank cross layers of rank 512, top
    1024-1024-512-256-1, multi-hot bags ``MLPERF_BAG_SIZES`` (sum pooling), Adagrad, global
    batch 55296."""
    return ModelSpec(
        num_tables=26,
        embedding_dim=128,
        global_batch=global_batch,
        bottom_mlp=(512, 256, 128),
        top_mlp=(1024, 1024, 512, 256, 1),
        bag_sizes=MLPERF_BAG_SIZES,
        cross_layers=3,
        cross_rank=512,
        optimizer="adagrad",
    )
