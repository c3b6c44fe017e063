"""jax_lossy_comm: error-bounded lossy compression of the DLRM embedding all-to-all.

After S. Feng et al., "Accelerating Communication in Deep Learning Recommendation Model
Training with Dual-Level Adaptive Lossy Compression", SC24 (arXiv 2407.04272).
"""

from jax_lossy_comm._ffi import implementations
from jax_lossy_comm.allreduce import (
    AllReduceConfig,
    ErrorFeedback,
    ErrorFeedbackState,
    compressed_psum,
    compressed_psum_with_stats,
    error_feedback,
)
from jax_lossy_comm.codec import compress, decompress, frame_status
from jax_lossy_comm.comm_codec import CommCodec, FrameCodec
from jax_lossy_comm.exchange import (
    ExchangeConfig,
    ExchangeStats,
    compressed_all_to_all,
    compressed_all_to_all_with_stats,
    node_bytes,
    resolve_path,
)
from jax_lossy_comm.frame import (
    CODECS,
    STATUS,
    FrameInfo,
    describe_status,
    frame_capacity,
    frame_info,
)
from jax_lossy_comm.layout import Layout, make_layout
from jax_lossy_comm.qcomm import BF16, Int8Rowwise

__version__ = "0.1.0"

__all__ = [
    "AllReduceConfig",
    "BF16",
    "CODECS",
    "CommCodec",
    "ErrorFeedback",
    "ErrorFeedbackState",
    "ExchangeConfig",
    "ExchangeStats",
    "FrameCodec",
    "FrameInfo",
    "Int8Rowwise",
    "Layout",
    "STATUS",
    "compress",
    "compressed_all_to_all",
    "compressed_all_to_all_with_stats",
    "compressed_psum",
    "compressed_psum_with_stats",
    "decompress",
    "describe_status",
    "error_feedback",
    "frame_capacity",
    "frame_info",
    "frame_status",
    "implementations",
    "make_layout",
    "node_bytes",
    "resolve_path",
]
