"""Command line of the embedding-parallel DLRM trainer: flags -> ``Config`` -> training.

Run ``python -m models.dlrm.main --help`` (``python -m models.dlrm.train`` is the same
command). Main job (synthetic data, 8 virtual CPU devices, exact vs compressed side by side)::

  python -m models.dlrm.main --devices 8 --compare --out runs/dlrm

Flags override the preset (``--preset kaggle|terabyte|tiny``, ``configs/``) or the Config of
``--config FILE``, each its one field (``flags.py`` generates one flag per Config field). ``--devices N`` sets N virtual CPU devices when no accelerator is used
(it must be applied before JAX starts its backends: ``processes.setup_jax``, first).
Multi-host: ``--coordinator HOST:PORT --num-processes N --process-id I`` (or the
``JAX_COORDINATOR_ADDRESS`` / ``JAX_NUM_PROCESSES`` / ``JAX_PROCESS_ID`` environment)
call ``jax.distributed.initialize``; each process reads its share of the data.
The run itself is ``train.train_and_evaluate(config, workdir)``: the same from Python.
"""

from __future__ import annotations

import json
import os
import sys

from models.dlrm import flags
from models.dlrm.processes import (
    peer_lost_reason,
    resume_point,
    setup_jax,
    stop_after_peer_lost,
)


def main(argv: list[str] | None = None) -> int:
    """Parses ``argv``, trains (twice with ``--compare``) and writes ``--out/final.json``.

    Returns:
      The exit status: 0; 2 for bad data or a checkpoint that cannot be restored, 1 for a
      diverged (non-finite) training loss, each printed as one line. Bad flags exit 2
      through argparse. A multi-process run whose peer process dies ends this process with
      exit status 3 and one line naming the checkpoint step a rerun resumes from. Ctrl-C
      (SIGINT) ends the run with exit status 130 and one line naming that step.
    """
    parser = flags.build_parser()
    args = parser.parse_args(argv)
    try:
        config = flags.config_from_flags(args)
    except (ValueError, OSError) as e:
        parser.error(flags.flag_message(str(e)))
    setup_jax(args)
    import jax

    from models.dlrm import train
    from models.dlrm.checkpoints import CheckpointError
    from models.dlrm.data.input_pipeline import DataError
    from models.dlrm.run_setup import ConfigError
    from models.dlrm.train_log import TrainingDivergedError

    progress = not args.no_progress
    try:
        if args.compare:
            results = train.compare_exchanges(config, args.out, progress=progress)
        else:
            result = train.train_and_evaluate(config, args.out, progress=progress)
            results = {config.compression: result}
    except (DataError, FileNotFoundError, CheckpointError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except ConfigError as e:
        print(f"error: {flags.flag_message(str(e))}", file=sys.stderr)
        return 2
    except TrainingDivergedError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C: one line, not a traceback (checkpoints.save holds
        # it back until a step being written is complete)
        where = "each of --out/exact, --out/compressed" if args.compare else "the run"
        resume = "resumes" if args.compare else resume_point(args.out)
        print(
            f"interrupted: rerun the same command to continue; {where} {resume}",
            file=sys.stderr,
        )
        return 130
    except jax.errors.JaxRuntimeError as e:
        reason = peer_lost_reason(e) if jax.process_count() > 1 else None
        if reason is None:
            raise
        stop_after_peer_lost(reason, args.out)
    if jax.process_index() == 0:
        with open(os.path.join(args.out, "final.json"), "w") as f:
            json.dump(results, f, indent=1)
        print("final: " + json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
