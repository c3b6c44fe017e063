"""jax_lossy_comm: error-bounded lossy compression of the DLRM embedding all-to-all.

After S. Feng et al., "Accelerating Communication in Deep Learning Recommendation Model
Training with Dual-Level Adaptive Lossy Compression", SC24 (arXiv 2407.04272).
"""

from jax_lossy_comm._ffi import describe as describe_implementation
from jax_lossy_comm._ffi import export_safety_checks, implementations, register
from jax_lossy_comm.allreduce import AllReduceConfig, compressed_psum, compressed_psum_with_stats
from jax_lossy_comm.codec import compress, decompress, decompress_with_status, frame_status
from jax_lossy_comm.codec_factory import get_comm_codec
from jax_lossy_comm.comm_codec import CommCodec, FrameCodec
from jax_lossy_comm.exchange import (
    ExchangeConfig,
    compressed_all_to_all,
    compressed_all_to_all_with_stats,
)
from jax_lossy_comm.feedback import ErrorFeedback, ErrorFeedbackState, error_feedback
from jax_lossy_comm.frame import (
    CODECS,
    STATUS,
    FrameInfo,
    describe_status,
    frame_capacity,
    frame_info,
)
from jax_lossy_comm.layout import Layout, make_layout
from jax_lossy_comm.precondition import adagrad_scale
from jax_lossy_comm.qcomm import BF16, FP16, MX4, FP8Rowwise, Int8Rowwise
from jax_lossy_comm.stats import ExchangeStats, node_bytes
from jax_lossy_comm.wire import resolve_path

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
    "FP16",
    "FP8Rowwise",
    "FrameCodec",
    "FrameInfo",
    "Int8Rowwise",
    "Layout",
    "MX4",
    "STATUS",
    "adagrad_scale",
    "compress",
    "compressed_all_to_all",
    "compressed_all_to_all_with_stats",
    "compressed_psum",
    "compressed_psum_with_stats",
    "decompress",
    "decompress_with_status",
    "describe_status",
    "error_feedback",
    "export_safety_checks",
    "frame_capacity",
    "frame_info",
    "frame_status",
    "get_comm_codec",
    "implementations",
    "describe_implementation",
    "make_layout",
    "node_bytes",
    "register",
    "resolve_path",
]
