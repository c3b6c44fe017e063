"""The trainer's data tools: Criteo text readers, text -> binary shards, the shard loader and
synthetic Criteo-like data.

``sources`` chooses what a run reads (synthetic data, text files or a shard folder) so the
readers never import each other; ``input_pipeline`` reads Criteo Kaggle / Terabyte text;
``preprocess`` converts text to binary shards (``text_source`` reads a file in chunks,
``chunk_convert`` converts each chunk, ``shard_format`` the on-disk format); ``shards``
memory-maps them (``stream_order`` the order its stream reads the training rows in);
``synthetic`` makes one- and multi-hot data with a teacher model, so that training needs no
download. These modules import only each other and the ``Config``.
"""
