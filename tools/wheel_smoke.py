"""Smoke test of an installed jax_lossy_comm (a wheel), run from outside the checkout by CI:

    python /path/to/checkout/tools/wheel_smoke.py /path/to/checkout/README.md

Runs the README's API example (its first ``python`` block) and an 8-device
``compressed_all_to_all`` with its gradient, checked against ``jax.lax.all_to_all``; fails
when the package imported is the checkout's rather than the installed one, or when the
compiled codec is not what runs on the CPU.
"""

import os
import re
import sys
from pathlib import Path

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import jax_lossy_comm as jlc  # noqa: E402

readme = Path(sys.argv[1]).resolve()
installed = Path(jlc.__file__).resolve()
# The installed copy (site-packages, wherever the venv lives), not the checkout's source tree.
assert installed.parent != readme.parent / "jax_lossy_comm", f"imported the checkout: {installed}"
assert jlc.implementations()["cpu"] == "compiled", jlc.implementations()

block = re.findall(r"```python\n(.*?)```", readme.read_text(), re.S)[0]
exec(compile(block, str(readme), "exec"), {})  # the README's example, as written

mesh = jax.make_mesh((8,), ("i",), axis_types=(jax.sharding.AxisType.Auto,))
cfg = jlc.ExchangeConfig(jlc.FrameCodec(min_error_bound=0.01), table_axis=1)
x = jnp.sin(jnp.arange(8 * 64 * 2 * 16, dtype=jnp.float32)).reshape(8 * 64, 2, 16)


def loss(x, exchange):
    return jax.lax.psum(jnp.sum(exchange(x) ** 2) / 2, "i")


def f(x):
    def comp(v):
        return jlc.compressed_all_to_all(v, "i", 0, 1, tiled=True, error_bound=0.01, config=cfg)

    def exact(v):
        return jax.lax.all_to_all(v, "i", 0, 1, tiled=True)

    return comp(x), exact(x), jax.grad(loss)(x, comp), jax.grad(loss)(x, exact)


y, ye, g, ge = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P("i"), out_specs=(P("i"),) * 4))(x)
err = float(jnp.abs(y - ye).max())
assert err <= 0.01 * 2.0, err  # REL 0.01 of a range of at most 2
# straight-through: d/dx sum(y^2)/2 = A^T y, y the compressed result: within the bound of A^T ye
assert float(jnp.abs(g - ge).max()) <= 0.01 * 2.0
print(f"wheel smoke: {installed.parent}, {jlc.implementations()}, max error {err:.4g}: ok")
