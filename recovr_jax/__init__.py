"""recovr_jax: interactive composed video retrieval in JAX.

The public API of docs/definitions.md §7. Metrics live in
``recovr_jax.metrics``.

Dimension legend used in every docstring: ``B`` queries (sessions in a batch),
``S`` sessions, ``T`` feedback turns, ``W`` ring window, ``C`` channels,
``K`` list length, ``M`` demotion-set size, ``N`` gallery size, ``D``
embedding size.
"""

from recovr_jax.core.demotion import rank_cap
from recovr_jax.core.fusion import fuse
from recovr_jax.core.retrieval import retrieve
from recovr_jax.core.slerp import slerp

__all__ = ['fuse', 'rank_cap', 'retrieve', 'slerp']
__version__ = '0.1.0'
