"""The metrics of docs/definitions.md §6 under their public path
(``from recovr_jax.metrics import ...``); they live in ``core.list_metrics``
and ``core.resampling``."""

from recovr_jax.core.list_metrics import bri
from recovr_jax.core.list_metrics import default_active
from recovr_jax.core.list_metrics import failure_modes
from recovr_jax.core.list_metrics import FailureModes
from recovr_jax.core.list_metrics import Rate
from recovr_jax.core.list_metrics import recall_at_k
from recovr_jax.core.list_metrics import target_ranks
from recovr_jax.core.resampling import bootstrap_indices
from recovr_jax.core.resampling import bootstrap_mean
from recovr_jax.core.resampling import BootstrapInterval
from recovr_jax.core.resampling import paired_bootstrap

__all__ = ['BootstrapInterval', 'FailureModes', 'Rate', 'bootstrap_indices',
           'bri', 'default_active', 'failure_modes', 'paired_bootstrap',
           'recall_at_k', 'target_ranks']
