"""The TorchRec peer's dense model set up as the library's: Flax's initializers on torch
modules (``init_like_library``), the library's dense Adagrad (``LibraryAdagrad``) and the
fused table optimizer FBGEMM really runs (``table_optimizer``). torch and torchrec are
imported where used (this module imports without them).
"""

from __future__ import annotations

from typing import Any

#: ``jax.nn.initializers.variance_scaling``'s stddev of a unit normal truncated to [-2, 2]
_TRUNCATED_STD = 0.87962566103423978


def glorot_normal_(weight, generator) -> None:
    """Flax's ``glorot_normal`` (``variance_scaling(1, "fan_avg", "truncated_normal")``) in
    place: a normal truncated at two standard deviations, variance ``2 / (fan_in + fan_out)``
    (a 2-D weight's fans are its two sizes, in either order)."""
    import torch

    std = (2.0 / sum(weight.shape)) ** 0.5 / _TRUNCATED_STD
    torch.nn.init.trunc_normal_(weight, 0.0, std, -2 * std, 2 * std, generator=generator)


def init_like_library(net, seed: int) -> None:
    """Re-initializes the dense part of ``net`` as the library's model does (seeded, the
    same on every rank): every ``nn.Linear`` kernel Glorot normal, its bias N(0, sqrt(1 /
    fan_out)) (``models.dlrm.models.MLP``); DCN-v2 cross kernels ``W`` / ``V`` Glorot normal,
    bias 0 (``models.dlrm.models.LowRankCrossNet``). The distributions, not the values:
    torch and JAX draw different numbers."""
    import torch
    from torchrec.modules.crossnet import LowRankCrossNet

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, torch.nn.Linear):
                glorot_normal_(m.weight, g)
                m.bias.copy_(torch.randn(m.bias.shape, generator=g) * (1.0 / m.out_features) ** 0.5)
            elif isinstance(m, LowRankCrossNet):
                for w in (*m.W_kernels, *m.V_kernels):
                    glorot_normal_(w, g)
                for b in m.bias:
                    b.zero_()


class LibraryAdagrad:
    """The library's dense Adagrad (``optax.adagrad(lr, initial_accumulator_value=0,
    eps)``) on torch parameters: ``acc += g**2; p -= lr * g / sqrt(acc + eps)`` per element
    (optax adds ``eps`` under the square root; ``torch.optim.Adagrad`` outside it).

    Args:
      params: the parameters (float32 tensors).
      lr: learning rate; eps: added to the accumulator under the square root.
    """

    def __init__(self, params, lr: float, eps: float):
        import torch

        self.params = list(params)
        self.lr, self.eps = float(lr), float(eps)
        self.acc = [torch.zeros_like(p) for p in self.params]

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        import torch

        with torch.no_grad():
            for p, acc in zip(self.params, self.acc):
                if p.grad is not None:
                    acc.addcmul_(p.grad, p.grad)
                    p.addcdiv_(p.grad, (acc + self.eps).sqrt(), value=-self.lr)


def table_optimizer(dmp) -> list[dict[str, Any]]:
    """FBGEMM's fused optimizer of every table batch of ``dmp`` (its ``optimizer`` type,
    learning rate and eps), read back from ``dmp.fused_optimizer`` (TorchRec's
    ``EmbeddingFusedOptimizer`` holds FBGEMM's module): what really updates the tables."""
    out, todo = [], [dmp.fused_optimizer]
    while todo:
        o = todo.pop()
        todo += [x[1] if isinstance(x, tuple) else x for x in getattr(o, "optimizers", [])]
        m = getattr(o, "_emb_module", None)
        if m is None or not hasattr(m, "optimizer_args"):
            continue
        lr = getattr(m, "learning_rate_tensor", None)
        out.append(
            {
                "optimizer": str(m.optimizer.value),
                "learning_rate": float(lr) if lr is not None else None,
                "eps": float(m.optimizer_args.eps),
                "tables": len(m.embedding_specs),
            }
        )
    return out
