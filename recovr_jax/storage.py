"""Orbax checkpointing that each process does on its own.

A run of several processes (``run.distributed``) saves and loads its
batch files and encoder checkpoints per process, never as one global array:
orbax's default would make every save wait for every process.
"""

import jax


def local_checkpointer():
  """An ``orbax.checkpoint.StandardCheckpointer`` acting for this process
  alone (its own primary host; no barrier with the others)."""
  import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  pid = jax.process_index()
  return ocp.StandardCheckpointer(
      multiprocessing_options=ocp.options.MultiprocessingOptions(
          primary_host=pid, active_processes={pid},
          barrier_sync_key_prefix=f'process{pid}'))


def local_struct(x):
  """The restore target of array ``x`` on this process's first device (a
  checkpoint records the device it was saved from, which another process
  of a run does not have)."""
  sharding = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
  return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding)

