"""MLPerf Training's DLRM-DCNv2 (mlcommons/training: ``recommendation_v2/torchrec_dlrm``,
README.MD "Running the MLPerf DLRM v2 benchmark" and ``dlrm_main.py``): 26 tables of the
40M-capped Criteo 1TB cardinalities, dim 128, bottom MLP 13-512-256-128, a DCN-v2 cross
network of 3 layers of rank 512, top MLP 1024-1024-512-256-1, multi-hot bags
3,2,1,2,6,1,1,1,1,7,3,8,1,6,9,5,1,1,1,12,100,27,10,3,1,1 with sum pooling (synthetic data:
MLPerf's multi-hot rule), Adagrad (lr 0.005, accumulator 0, eps 1e-10) on the head and the
tables, global batch 65536; the paper artifact's Terabyte error-bound tiers (the same
table order). The model is TorchRec's ``DLRM_DCN`` (meta-pytorch/torchrec:
``torchrec/models/dlrm.py``). Far too large for a CPU: ``dcnv2_small`` is the variant that
trains here."""

from models.dlrm.configs import error_bound_presets
from models.dlrm.configs.default import (
    MLPERF_DCNV2_CARDINALITIES,
    MLPERF_DCNV2_MULTI_HOT_SIZES,
    Config,
)


def get_config() -> Config:
    return Config(
        embedding_dim=128,
        bottom_mlp=(512, 256, 128),
        top_mlp=(1024, 1024, 512, 256, 1),
        cardinalities=MLPERF_DCNV2_CARDINALITIES,
        max_ind_range=0,  # the cardinalities are MLPerf's, already capped at 40M
        interaction="dcn",
        dcn_num_layers=3,
        dcn_low_rank_dim=512,
        data_format="terabyte",
        synthetic_multi_hot_sizes=MLPERF_DCNV2_MULTI_HOT_SIZES,
        synthetic_multi_hot_rule="mlperf",
        batch_size=65536,
        optimizer="adagrad",
        learning_rate=0.005,
        adagrad_eps=1e-10,
        error_bound=error_bound_presets.preset("paper_terabyte", len(MLPERF_DCNV2_CARDINALITIES)),
    )
