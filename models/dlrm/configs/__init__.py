"""Configuration presets for the DLRM trainer: ``kaggle``, ``terabyte``, ``tiny``, ``dcnv2``
(MLPerf's DLRM-DCNv2) and ``dcnv2_small`` (it, scaled down for CPUs).

Each preset module has ``get_config() -> Config``; ``get_config(name)`` picks one.
"""

from models.dlrm.configs.default import Config
from models.dlrm.configs.default import get_config as _default

PRESETS = ("kaggle", "terabyte", "tiny", "dcnv2", "dcnv2_small")


def get_config(name: str = "kaggle") -> Config:
    """Returns the preset ``name`` (one of ``PRESETS``).

    Raises:
      ValueError: ``name`` is not a preset.
    """
    if name == "kaggle":
        from models.dlrm.configs import kaggle as m
    elif name == "terabyte":
        from models.dlrm.configs import terabyte as m
    elif name == "tiny":
        from models.dlrm.configs import tiny as m
    elif name == "dcnv2":
        from models.dlrm.configs import dcnv2 as m
    elif name == "dcnv2_small":
        from models.dlrm.configs import dcnv2_small as m
    elif name == "default":
        return _default()
    else:
        raise ValueError(f"unknown preset {name!r}; expected one of {PRESETS}")
    return m.get_config()


__all__ = ["Config", "PRESETS", "get_config"]
