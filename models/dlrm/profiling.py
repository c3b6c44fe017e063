"""A trace of a few train steps (``Config.profile_steps``), and the scopes that name a step's
phases in it.

The train step's collectives run under ``jax.named_scope`` (:data:`EXCHANGE_SCOPE` around
``pooled_all_to_all.embedding_exchange``, :data:`ALLREDUCE_SCOPE` around
``grad_allreduce.reduce_head_grads``, :data:`IDS_SCOPE` around the ids' all-to-all), so every
HLO op they lower to carries the scope in its ``op_name`` metadata, the backward exchange's
under ``transpose(...)``. :class:`StepTrace`
records ``jax.profiler``'s trace of ``Config.profile_steps`` steps into
``WORKDIR/profile/process_I`` (TensorBoard's profile plugin and Perfetto read it) beside the
compiled train step's HLO text (``train_step.hlo.txt``) and ``steps.json`` (written once the
trace is complete); with them,
``bench.testbed.step_phases`` sums the time of each XLA op by phase.
"""

from __future__ import annotations

import json
import os
import shutil

import jax

#: jax.named_scope of the embedding exchange (forward; its transpose is the backward)
EXCHANGE_SCOPE = "embedding_exchange"
#: jax.named_scope of the head gradients' all-reduce
ALLREDUCE_SCOPE = "gradient_all_reduce"
#: jax.named_scope of the ids' all-to-all (to the tables' owners, before the lookup)
IDS_SCOPE = "ids_all_to_all"
#: files of one process's trace folder besides jax.profiler's own (plugins/profile/...)
HLO_FILE, STEPS_FILE = "train_step.hlo.txt", "steps.json"


def trace_dir(workdir: str, process_index: int) -> str:
    """The folder of one process's trace in a run's workdir."""
    return os.path.join(workdir, "profile", f"process_{process_index}")


class StepTrace:
    """Traces ``steps`` train steps of a run, from the step after its first, compiled one
    (that one is the warm step).

    ``before(step, state)`` and ``after(step, outputs)`` bracket every step of the loop; both
    do nothing outside the traced steps or with ``steps`` 0; ``close()`` (in the loop's
    ``finally``) stops a trace an exception left running, so it writes no ``steps.json``. The
    trace starts and ends with every earlier step finished (``jax.block_until_ready``), so it
    holds whole steps only; a new trace first removes the folder's earlier one, so the reader
    never pairs another run's trace with this run's HLO. Python function tracing is off
    (``ProfileOptions.python_tracer_level`` 0, host level 1): XLA's own op events remain, at
    little cost; writing the trace at its end is not little, and the logging interval that
    holds it is slower by it.
    """

    def __init__(self, steps: int, workdir: str, first_step: int, last_step: int):
        """``steps`` traced after ``first_step`` (the run's first step, compiled and the warm
        one), at most up to ``last_step`` (the run's last): fewer when the run ends sooner,
        none when it ends at ``first_step``."""
        self.path = trace_dir(workdir, jax.process_index())
        self.first = first_step + 1
        self.last = min(self.first + steps - 1, last_step) if steps > 0 else -1
        if self.last < self.first:
            self.last = -1
        self.running = False

    def save_hlo(self, compiled) -> None:
        """Writes the compiled train step's HLO text (op names -> scopes, for the reader)."""
        if self.last < 0:
            return
        os.makedirs(self.path, exist_ok=True)
        with open(os.path.join(self.path, HLO_FILE), "w") as f:
            f.write(compiled.as_text())

    def before(self, step: int, state) -> None:
        if self.last < 0 or step != self.first:
            return
        jax.block_until_ready(state)
        shutil.rmtree(os.path.join(self.path, "plugins"), ignore_errors=True)
        if os.path.exists(steps_file := os.path.join(self.path, STEPS_FILE)):
            os.remove(steps_file)
        options = jax.profiler.ProfileOptions()
        options.python_tracer_level = 0
        options.host_tracer_level = 1
        jax.profiler.start_trace(self.path, create_perfetto_trace=True, profiler_options=options)
        self.running = True

    def after(self, step: int, outputs) -> None:
        if not self.running or step != self.last:
            return
        jax.block_until_ready(outputs)
        self.close()
        record = {"first_step": self.first, "last_step": self.last}
        with open(os.path.join(self.path, STEPS_FILE), "w") as f:
            json.dump(record, f)

    def close(self) -> None:
        """Stops the trace if one is running (the end of the window, or an exception in it)."""
        if self.running:
            self.running = False
            jax.profiler.stop_trace()
