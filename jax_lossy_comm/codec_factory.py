"""The one map from a precision or codec name to a :class:`jax_lossy_comm.CommCodec`.

TorchRec picks its quantized-comm codecs with one factory keyed by precision name
(``get_qcomm_codecs(QCommsConfig(forward_precision=CommType.INT8, ...))``); this is the same
for the library: :func:`get_comm_codec` turns a name from a command line, a config or
TorchRec's vocabulary into the :class:`CommCodec` object that
:class:`jax_lossy_comm.ExchangeConfig` takes. Vocabulary: *the codec* is the library's
error-bounded frame codec (``xla_ffi``, :func:`jax_lossy_comm.compress`); a *CommCodec* is
what an exchange runs on each chunk: :class:`FrameCodec` (the codec's frames) or one of the
TorchRec/FBGEMM baselines of :mod:`jax_lossy_comm.qcomm`.

Names (any case; ``_`` and ``-`` alike):

* ``FRAME_CODECS`` -- the codec's forms, ``auto``, ``raw``, ``fixed``, ``dedup``,
  ``entropy`` (``frame.CODECS``): ``FrameCodec(mode, codec=name, min_error_bound)``.
* ``BASELINES`` -- the TorchRec/FBGEMM baselines by the trainer's ``--codec`` names,
  ``int8-rowwise``, ``bf16``, ``fp16``, ``fp8-rowwise``, ``mx4``, and by TorchRec's
  ``CommType``/``SparseType`` names (``TORCHREC_NAMES``): ``INT8``, ``BF16``, ``FP16``,
  ``FP8``, ``MX4``. Default fields (row-wise INT8 and FP8 e4m3 over rows of 32, MX4 groups of
  32), as TorchRec's ``QCommsConfig`` defaults.
* ``EXACT`` -- ``FP32`` (TorchRec's unquantized precision) and ``exact``: None, no CommCodec:
  the exact ``jax.lax.all_to_all`` (``ExchangeConfig(backward=None)``, or no
  ``ExchangeConfig`` at all for the forward exchange).

References:
  TorchRec ``torchrec/distributed/fbgemm_qcomm_codec.py`` (``CommType``, ``QCommsConfig``,
  ``get_qcomm_codecs``); FBGEMM ``fbgemm_gpu/split_embedding_configs.py`` (``SparseType``).
"""

from __future__ import annotations

from jax_lossy_comm import frame as _frame
from jax_lossy_comm.comm_codec import CommCodec, FrameCodec
from jax_lossy_comm.qcomm import BF16, FP16, MX4, FP8Rowwise, Int8Rowwise

#: The codec's forms (``frame.CODECS``), each a :class:`FrameCodec`.
FRAME_CODECS = tuple(_frame.CODECS)
#: The TorchRec/FBGEMM baselines by the trainer's names -> their :mod:`jax_lossy_comm.qcomm`
#: class (constructed with its defaults).
BASELINES = {
    "int8-rowwise": Int8Rowwise,
    "bf16": BF16,
    "fp16": FP16,
    "fp8-rowwise": FP8Rowwise,
    "mx4": MX4,
}
#: TorchRec's precision names (``CommType``/``SparseType``, lower case) of the baselines.
TORCHREC_NAMES = {
    "int8": "int8-rowwise",
    "bf16": "bf16",
    "fp16": "fp16",
    "fp8": "fp8-rowwise",
    "mx4": "mx4",
}
#: Names of the exact exchange (no CommCodec).
EXACT = ("exact", "fp32")
#: Every name :func:`get_comm_codec` accepts (lower case).
NAMES = (*FRAME_CODECS, *BASELINES, *(n for n in TORCHREC_NAMES if n not in BASELINES), *EXACT)


def canonical_name(name: str) -> str:
    """The canonical lower-case name of a precision or codec name (TorchRec's aliases resolved).

    Args:
      name: any name of ``NAMES``, any case, ``_`` or ``-``.

    Returns:
      str: a name of ``FRAME_CODECS``, of ``BASELINES`` or of ``EXACT``.

    Raises:
      ValueError: an unknown name (the message lists ``NAMES``); TypeError: not a str.

    Examples:
      >>> canonical_name("INT8"), canonical_name("fp8_rowwise"), canonical_name("FP32")
      ('int8-rowwise', 'fp8-rowwise', 'fp32')
    """
    if not isinstance(name, str):
        raise TypeError(f"a codec name is a str, got {name!r}")
    key = name.strip().lower().replace("_", "-")
    key = TORCHREC_NAMES.get(key, key)
    if key not in NAMES:
        raise ValueError(f"unknown codec {name!r}; expected one of {', '.join(NAMES)} (any case)")
    return key


def get_comm_codec(
    name: str, *, mode: str = "rel", min_error_bound: float | None = None
) -> CommCodec | None:
    """The :class:`CommCodec` of a precision or codec name (module docstring lists them).

    Args:
      name: a codec form (``auto``, ``raw``, ``fixed``, ``dedup``, ``entropy``), a baseline
        (``int8-rowwise``, ``bf16``, ``fp16``, ``fp8-rowwise``, ``mx4``), a TorchRec precision
        (``INT8``, ``BF16``, ``FP16``, ``FP8``, ``MX4``, ``FP32``) or ``exact``; any case.
      mode: ``"rel"`` (``eb_abs = eb_rel * (max - min)`` of each chunk) or ``"abs"``: the
        :class:`FrameCodec`'s error-bound mode. The baselines have no error bound: they ignore
        ``mode`` and ``min_error_bound``, as their ``encode`` ignores the bound.
      min_error_bound: the smallest REL bound the traced bound takes (sizes the dense
        frames; :class:`FrameCodec`), or None.

    Returns:
      ``FrameCodec(mode, codec=name, min_error_bound)`` for a codec form, the baseline's
      ``jax_lossy_comm.qcomm`` object with its defaults, or None for ``FP32``/``exact``
      (the exact exchange).

    Raises:
      ValueError: an unknown name (the message lists every accepted name); from
        :class:`FrameCodec`, an unknown ``mode`` or a ``min_error_bound`` <= 0.
      TypeError: a name that is not a str.

    Examples:
      >>> from jax_lossy_comm import get_comm_codec
      >>> get_comm_codec("fixed", min_error_bound=0.01)
      FrameCodec(mode='rel', codec='fixed', min_error_bound=0.01, capacity=None)
      >>> get_comm_codec("INT8"), get_comm_codec("mx4"), get_comm_codec("FP32")
      (Int8Rowwise(row_dim=32), MX4(group_size=32), None)
      >>> get_comm_codec("int4")
      Traceback (most recent call last):
      ...
      ValueError: unknown codec 'int4'; expected one of auto, raw, fixed, dedup, entropy, \
int8-rowwise, bf16, fp16, fp8-rowwise, mx4, int8, fp8, exact, fp32 (any case)

    References:
      TorchRec ``fbgemm_qcomm_codec.py`` (``get_qcomm_codecs``: one codec per precision).
    """
    key = canonical_name(name)
    if key in EXACT:
        return None
    if key in BASELINES:
        return BASELINES[key]()
    return FrameCodec(mode=mode, codec=key, min_error_bound=min_error_bound)
