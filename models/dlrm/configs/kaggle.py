"""The paper's Criteo Kaggle model: dim 32, bottom 13-512-256-64-32, top 512-256-1."""

from models.dlrm.configs.default import Config


def get_config() -> Config:
    return Config()
