"""Example models built on jax_lossy_comm (see models/dlrm)."""
