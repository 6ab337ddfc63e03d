"""The experiment as a library: configuration, runner, reports, and
``load_run`` to read a finished run back."""

from recovr_jax.run.results import load_run
