"""Command line of the embedding-parallel DLRM trainer: flags -> ``Config`` -> training.

Run ``python -m models.dlrm.main --help`` (``python -m models.dlrm.train`` is the same
command). Main job (synthetic data, 8 virtual CPU devices, exact vs compressed side by side)::

  python -m models.dlrm.main --devices 8 --compare --out runs/dlrm

Flags override the preset (``--preset kaggle|terabyte|tiny``, ``configs/``), each its one
field (``flags.py``). ``--devices N`` sets N virtual CPU devices when no accelerator is used
(it must be applied before JAX starts its backends, so it is handled here first).
Multi-host: ``--coordinator HOST:PORT --num-processes N --process-id I`` (or the
``JAX_COORDINATOR_ADDRESS`` / ``JAX_NUM_PROCESSES`` / ``JAX_PROCESS_ID`` environment)
call ``jax.distributed.initialize``; each process reads its share of the data.
The run itself is ``train.train_and_evaluate(config, workdir)``: the same from Python.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from models.dlrm import flags


def setup_jax(args: argparse.Namespace) -> None:
    """Virtual devices and jax.distributed, before any backend starts.

    Raises:
      ValueError: ``--devices`` asks for more accelerators than this process has.
    """
    import jax

    if args.devices:
        jax.config.update("jax_num_cpu_devices", args.devices)
    if args.coordinator:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(
            coordinator_address=args.coordinator,
            num_processes=args.num_processes,
            process_id=args.process_id,
        )
    if args.devices and jax.default_backend() != "cpu" and jax.local_device_count() < args.devices:
        raise ValueError(f"--devices {args.devices}: only {jax.local_device_count()} local devices")


def main(argv: list[str] | None = None) -> int:
    """Parses ``argv``, trains (twice with ``--compare``) and writes ``--out/final.json``.

    Returns:
      The exit status: 0, or 2 for a data error (printed as one line). Bad flags exit 2
      through argparse.
    """
    parser = flags.build_parser()
    args = parser.parse_args(argv)
    try:
        config = flags.config_from_flags(args)
    except (ValueError, OSError) as e:
        parser.error(str(e))
    setup_jax(args)
    import jax

    from models.dlrm import train
    from models.dlrm.input_pipeline import MalformedLineError

    progress = not args.no_progress
    try:
        if args.compare:
            results = train.compare_exchanges(config, args.out, progress=progress)
        else:
            result = train.train_and_evaluate(config, args.out, progress=progress)
            results = {config.compression: result}
    except (MalformedLineError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if jax.process_index() == 0:
        with open(os.path.join(args.out, "final.json"), "w") as f:
            json.dump(results, f, indent=1)
        print("final: " + json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
