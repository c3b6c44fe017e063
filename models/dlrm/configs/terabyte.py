"""Criteo Terabyte model: dim 64, bottom 13-512-256-64, top 512-512-256-1; the paper
artifact's Terabyte error-bound tiers."""

from models.dlrm.configs import error_bound_presets
from models.dlrm.configs.default import TERABYTE_CARDINALITIES, Config


def get_config() -> Config:
    return Config(
        embedding_dim=64,
        bottom_mlp=(512, 256, 64),
        top_mlp=(512, 512, 256, 1),
        cardinalities=TERABYTE_CARDINALITIES,
        data_format="terabyte",
        batch_size=2048,
        error_bound=error_bound_presets.preset("paper_terabyte", len(TERABYTE_CARDINALITIES)),
    )
