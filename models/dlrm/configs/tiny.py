"""A tiny model for tests: 26 small tables, dim 8, narrow MLPs, few steps (the paper's Kaggle
error-bound tiers, like the kaggle preset)."""

from models.dlrm.configs.default import Config


def get_config() -> Config:
    return Config(
        embedding_dim=8,
        bottom_mlp=(16, 8),
        top_mlp=(16, 1),
        max_ind_range=500,
        batch_size=64,
        steps=20,
        eval_rows=512,
        eval_batch_size=256,
        eval_every=10,
        log_every=5,
        checkpoint_every=10,
    )
