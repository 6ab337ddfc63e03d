"""The metrics of docs/definitions.md §6 under their public path
(``from recovr_jax.metrics import ...``); they live in ``core.list_metrics``."""

from recovr_jax.core.list_metrics import bootstrap_indices
from recovr_jax.core.list_metrics import bootstrap_mean
from recovr_jax.core.list_metrics import BootstrapInterval
from recovr_jax.core.list_metrics import bri
from recovr_jax.core.list_metrics import default_active
from recovr_jax.core.list_metrics import failure_modes
from recovr_jax.core.list_metrics import FailureModes
from recovr_jax.core.list_metrics import paired_bootstrap
from recovr_jax.core.list_metrics import Rate
from recovr_jax.core.list_metrics import recall_at_k
from recovr_jax.core.list_metrics import target_ranks

__all__ = ['BootstrapInterval', 'FailureModes', 'Rate', 'bootstrap_indices',
           'bri', 'default_active', 'failure_modes', 'paired_bootstrap',
           'recall_at_k', 'target_ranks']
