"""jax_lossy_comm: error-bounded lossy compression of the DLRM embedding all-to-all.

After S. Feng et al., "Accelerating Communication in Deep Learning Recommendation Model
Training with Dual-Level Adaptive Lossy Compression", SC24 (arXiv 2407.04272).
"""

from jax_lossy_comm.codec import compress, decompress, frame_status
from jax_lossy_comm.exchange import ExchangeStats, compressed_all_to_all
from jax_lossy_comm.frame import (
    CODECS,
    STATUS,
    FrameInfo,
    describe_status,
    frame_capacity,
    frame_info,
)
from jax_lossy_comm.qcomm import bf16_all_to_all, int8_rowwise_all_to_all

__version__ = "0.1.0"

__all__ = [
    "CODECS",
    "ExchangeStats",
    "STATUS",
    "FrameInfo",
    "bf16_all_to_all",
    "compress",
    "compressed_all_to_all",
    "decompress",
    "describe_status",
    "frame_capacity",
    "frame_info",
    "frame_status",
    "int8_rowwise_all_to_all",
]
