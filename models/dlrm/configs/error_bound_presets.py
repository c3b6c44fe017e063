"""Named settings of the adaptive error bound for the DLRM presets: the paper's Kaggle and
Terabyte tiers, and a uniform bound (``--eb-preset``).

Reference: Feng et al., SC24, arXiv 2407.04272 (dual-level adaptive error bound); the
authors' artifact for the tiers (``kaggle_train_with_compress_adaptive.sh``; Terabyte table
groups tight {0,9,10,19,20,21,22} and loose {5,8,12,15,16,17,18,24,25}).
"""

from __future__ import annotations

from jax_lossy_comm.error_bound import ErrorBoundConfig, paper_kaggle_config

#: Names accepted by ``preset`` (and ``--eb-preset``).
PRESETS = ("paper_kaggle", "paper_terabyte", "uniform")

# The paper artifact's Terabyte table groups; the bounds (tighten 0.01, loosen 0.05, base
# 0.03) and the log schedule are the Kaggle ones: the artifact does not record others.
_TERABYTE_TIERS = {
    "tighten": (0.01, (0, 9, 10, 19, 20, 21, 22)),
    "loosen": (0.05, (5, 8, 12, 15, 16, 17, 18, 24, 25)),
}


def preset(name: str, num_tables: int = 26) -> ErrorBoundConfig:
    """A named error-bound setting for ``num_tables`` tables.

    Args:
      name: ``"paper_kaggle"`` (tighten 0.01 for {2,3,9,11,15,20,23,25}, loosen 0.05 for
        {8,16,19,21,22,24}, base 0.03, log schedule x2 over 65536 steps),
        ``"paper_terabyte"`` (the same bounds and schedule on the Terabyte tables: tighten
        {0,9,10,19,20,21,22}, loosen {5,8,12,15,16,17,18,24,25}) or ``"uniform"`` (base
        0.03 for every table, no tiers, the library's default linear schedule).
      num_tables: tables of the model; the paper presets need at least 26.

    Returns:
      The validated config.

    Raises:
      ValueError: unknown ``name``, or too few tables for the preset's tier ids.
    """
    if name == "paper_kaggle":
        return paper_kaggle_config(num_tables)
    if name == "paper_terabyte":
        return paper_kaggle_config(num_tables, tiers=_TERABYTE_TIERS)
    if name == "uniform":
        return ErrorBoundConfig(num_tables=num_tables, base=0.03)
    raise ValueError(f"unknown error-bound preset {name!r}; expected one of {PRESETS}")
