"""DLRM-DCNv2 scaled down to train on 2 CPU cores in a minute or two: the ``dcnv2`` preset
(MLPerf's model: DCN-v2 cross network, MLPerf's per-table multi-hot bags with sum pooling,
Adagrad, the Terabyte tables and error-bound tiers) with tables capped at 20,000 rows, dim 16,
narrow MLPs (bottom 13-64-16, top 64-32-1), 2 cross layers of rank 32 and batch 512."""

import dataclasses

from models.dlrm.configs import dcnv2


def get_config():
    return dataclasses.replace(
        dcnv2.get_config(),
        embedding_dim=16,
        bottom_mlp=(64, 16),
        top_mlp=(64, 32, 1),
        max_ind_range=20_000,
        dcn_num_layers=2,
        dcn_low_rank_dim=32,
        batch_size=512,
        learning_rate=0.01,
        steps=200,
        eval_rows=16_384,
        eval_batch_size=4096,
        eval_every=100,
        log_every=25,
        checkpoint_every=100,
    )
