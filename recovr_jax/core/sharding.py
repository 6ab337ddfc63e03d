"""A gallery sharded over devices (``jax.sharding``).

The mesh has a ``gallery`` axis and a ``session`` axis. Each device scores
its gallery shard for its share of the queries and keeps a local top-k; the
shards' lists are gathered in shard order (lower ids first) and merged with
one more ``lax.top_k``, whose lower-index-first tie rule then gives exactly
the unsharded result, ties included. A gallery whose size does not divide by
the number of shards is padded with rows that are never returned.

Several processes (``run.distributed``): the runner gives each its
``jax.local_devices()``. Global meshes: call ``jax.distributed.initialize()``
on every process first; then ``jax.devices()`` lists every process's devices
and ``make_mesh`` spans them. ``shard_gallery`` places a gallery every
process holds whole; ``shard_gallery_rows`` one of which each process holds
only its own rows (``process_rows``), so a gallery larger than one machine's
memory can be searched; ``sharded_retrieve`` then takes the same queries on
every process and returns the same lists on every process.
"""

import functools

import jax
from jax import lax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from recovr_jax.core import checks
from recovr_jax.core import retrieval

GALLERY_AXIS = 'gallery'
SESSION_AXIS = 'session'


def make_mesh(gallery_shards: int | None = None, session_shards: int = 1,
              devices=None) -> Mesh:
  """A ``(session, gallery)`` mesh over ``devices`` (default: all)."""
  devices = list(jax.devices() if devices is None else devices)
  session_shards = checks.positive_int('session_shards', session_shards)
  if gallery_shards is None:
    gallery_shards = len(devices) // session_shards
  gallery_shards = checks.positive_int('gallery_shards', gallery_shards)
  need = gallery_shards * session_shards
  if need > len(devices):
    raise ValueError(f'a {session_shards} x {gallery_shards} mesh needs '
                     f'{need} devices; {len(devices)} are available')
  grid = np.array(devices[:need]).reshape(session_shards, gallery_shards)
  return Mesh(grid, (SESSION_AXIS, GALLERY_AXIS))


def shard_gallery(gallery, mesh: Mesh):
  """Pads ``[N, D]`` rows to a multiple of the gallery shards and places them.

  Returns:
    ``(sharded [N', D] array, N)``; rows ``>= N`` are padding.
  """
  gallery = checks.array('gallery', gallery, 2, 'float')
  checks.finite('gallery', gallery)
  n, _ = gallery.shape
  shards = mesh.shape[GALLERY_AXIS]
  padded = -(-n // shards) * shards
  if padded != n:
    gallery = jnp.pad(jnp.asarray(gallery), ((0, padded - n), (0, 0)))
  return jax.device_put(gallery, NamedSharding(mesh, P(GALLERY_AXIS, None))), n


def spans_processes(mesh: Mesh) -> bool:
  """Whether ``mesh`` holds devices of other processes."""
  return any(d.process_index != jax.process_index()
             for d in mesh.devices.flat)


def place(tree, mesh: Mesh, spec: P = P()):
  """``tree`` (the same values on every process) placed with ``spec`` on
  ``mesh``. A mesh over several processes' devices takes host values (JAX
  refuses to move one process's device array there), so every leaf goes
  through NumPy; PRNG keys travel as their key data."""
  sharding = NamedSharding(mesh, spec)
  if not spans_processes(mesh):
    return jax.device_put(tree, sharding)

  def leaf(x):
    if isinstance(x, jax.Array) and jnp.issubdtype(x.dtype,
                                                   jax.dtypes.prng_key):
      return jax.random.wrap_key_data(
          jax.device_put(np.asarray(jax.random.key_data(x)), sharding),
          impl=jax.random.key_impl(x))
    return jax.device_put(np.asarray(x), sharding)
  return jax.tree.map(leaf, tree)


def gather(tree):
  """``tree`` of (possibly several processes') arrays as NumPy arrays, whole
  on every process."""
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top

  def leaf(x):
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
      return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(x)
  return jax.tree.map(leaf, tree)


def process_mesh(devices_per_process: int = 1) -> Mesh:
  """A mesh whose session axis spans the first ``devices_per_process``
  devices of every process (in process order): one jitted computation over
  all of a multi-process run's devices."""
  devices_per_process = checks.positive_int('devices_per_process',
                                            devices_per_process)
  chosen = []
  for p in range(jax.process_count()):
    mine = sorted((d for d in jax.devices() if d.process_index == p),
                  key=lambda d: d.id)
    if len(mine) < devices_per_process:
      raise ValueError(f'process {p} has {len(mine)} devices; '
                       f'{devices_per_process} per process were asked for')
    chosen.extend(mine[:devices_per_process])
  return make_mesh(gallery_shards=1, session_shards=len(chosen),
                   devices=chosen)


def process_gallery_mesh(devices_per_process: int = 1) -> Mesh:
  """A mesh whose gallery axis has one entry per process (process ``p``
  holds gallery shard ``p``) and whose session axis spans the first
  ``devices_per_process`` devices of each process."""
  devices_per_process = checks.positive_int('devices_per_process',
                                            devices_per_process)
  mesh = process_mesh(devices_per_process)  # checks every process has them
  grid = np.array(list(mesh.devices.flat)).reshape(
      jax.process_count(), devices_per_process).T
  return Mesh(grid, (SESSION_AXIS, GALLERY_AXIS))


def process_rows(num_rows: int, mesh: Mesh) -> tuple[int, int]:
  """``(start, stop)``: the gallery rows this process holds for
  ``shard_gallery_rows`` (its devices' shards of the padded gallery; rows
  ``>= num_rows`` are padding it need not hold). The gallery axis must list
  each process's devices together (``make_mesh`` over ``jax.devices()``
  does)."""
  num_rows = checks.positive_int('num_rows', num_rows)
  shards = mesh.shape[GALLERY_AXIS]
  per_shard = -(-num_rows // shards)
  mine = [g for g in range(shards)
          if mesh.devices[0, g].process_index == jax.process_index()]
  if not mine:
    raise ValueError(f'process {jax.process_index()} has no device on the '
                     "mesh's gallery axis")
  if mine != list(range(mine[0], mine[-1] + 1)):
    raise ValueError(f'process {jax.process_index()}\'s devices are not '
                     f'together on the gallery axis (shards {mine})')
  return (min(mine[0] * per_shard, num_rows),
          min((mine[-1] + 1) * per_shard, num_rows))


def shard_gallery_rows(rows, mesh: Mesh, num_rows: int):
  """Places a gallery of which this process holds only ``rows``, the block
  ``process_rows(num_rows, mesh)``, every process passing its own.

  Returns:
    ``(sharded [N', D] array, num_rows)`` as ``shard_gallery`` does.
  """
  rows = checks.array('rows', rows, 2, 'float')
  checks.finite('rows', rows)
  start, stop = process_rows(num_rows, mesh)
  if rows.shape[0] != stop - start:
    raise ValueError(f'rows: process {jax.process_index()} holds gallery '
                     f'rows [{start}, {stop}) of {num_rows}, so it passes '
                     f'{stop - start} rows; got {rows.shape[0]}')
  shards = mesh.shape[GALLERY_AXIS]
  per_shard = -(-num_rows // shards)
  held = sum(d.process_index == jax.process_index()
             for d in mesh.devices[0]) * per_shard
  local = np.zeros((held, rows.shape[1]), np.float32)
  local[:stop - start] = rows
  sharding = NamedSharding(mesh, P(GALLERY_AXIS, None))
  return jax.make_array_from_process_local_data(
      sharding, local, (per_shard * shards, rows.shape[1])), num_rows


def sharded_retrieve(queries, gallery, k: int, *, mesh: Mesh, num_valid: int,
                     exclude=None, block_size: int = retrieval.DEFAULT_BLOCK_SIZE):
  """``retrieve`` over a gallery placed by ``shard_gallery``.

  Args:
    queries: ``[B, D]``; ``B`` is padded to a multiple of the session shards.
    gallery: the sharded ``[N', D]`` gallery.
    k: list length.
    mesh: from ``make_mesh``.
    num_valid: the gallery's real size ``N`` (from ``shard_gallery``).
    exclude: ``None`` or ``[B]`` ids to drop per query.
    block_size: rows per block within a shard.

  Returns:
    ``(ids [B, k] int32, scores [B, k] float32)``, equal to ``retrieve`` on
    the unpadded gallery.
  """
  k = checks.positive_int('k', k)
  block_size = checks.positive_int('block_size', block_size)
  queries = checks.array('queries', queries, 2, 'float')
  b, d = queries.shape
  checks.same('queries', d, 'gallery', gallery.shape[1], 'embedding size D')
  checks.finite('queries', queries)
  exclude = (np.full((b,), -1, np.int32) if exclude is None else
             checks.array('exclude', exclude, 1, 'int'))
  checks.shape('exclude', exclude, (b,))
  sessions = mesh.shape[SESSION_AXIS]
  padded_b = -(-b // sessions) * sessions
  queries = jnp.pad(jnp.asarray(queries, jnp.float32),
                    ((0, padded_b - b), (0, 0)))
  exclude = jnp.pad(jnp.asarray(exclude, jnp.int32), (0, padded_b - b),
                    constant_values=-1)
  shard_rows = gallery.shape[0] // mesh.shape[GALLERY_AXIS]
  if jax.process_count() > 1:  # global inputs, the same on every process
    queries, exclude = (jax.make_array_from_process_local_data(
        NamedSharding(mesh, P()), np.asarray(x)) for x in (queries, exclude))
  ids, scores = _sharded(queries, gallery, exclude, mesh=mesh, k=k,
                         block_size=min(block_size, shard_rows),
                         num_valid=num_valid)
  if jax.process_count() > 1:  # the merged lists, on every process
    from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
    ids, scores = (multihost_utils.process_allgather(x, tiled=True)
                   for x in (ids, scores))
  return ids[:b], scores[:b]


@functools.partial(jax.jit, static_argnames=('mesh', 'k', 'block_size',
                                             'num_valid'))
def _sharded(queries, gallery, exclude, *, mesh, k, block_size, num_valid):
  def local(q, g, ex):
    n_local, _ = g.shape
    offset = lax.axis_index(GALLERY_AXIS) * n_local
    ids, scores = retrieval.top_k_blocks(
        q, g, ex, k=k, block_size=block_size, id_offset=offset,
        num_valid=num_valid)
    return merge_shards(ids, scores, GALLERY_AXIS, k)

  # The merged lists are equal on every gallery shard (they come from an
  # all_gather), which the replication checker cannot infer here.
  return jax.shard_map(
      local, mesh=mesh, check_vma=False,
      in_specs=(P(SESSION_AXIS, None), P(GALLERY_AXIS, None), P(SESSION_AXIS)),
      out_specs=(P(SESSION_AXIS, None), P(SESSION_AXIS, None)))(
          queries, gallery, exclude)


def merge_shards(ids, scores, axis: str, k: int):
  """Inside ``shard_map``: every shard's best-first lists ``[B, k']`` of
  global ids, gathered in shard order and merged by one ``top_k``. Shard
  order is id order, so ties go to the lower id, as on the whole gallery;
  entries scoring ``-inf`` are ``-1``."""
  all_ids = lax.all_gather(ids, axis, axis=1, tiled=True)
  all_scores = lax.all_gather(scores, axis, axis=1, tiled=True)
  top, pos = lax.top_k(all_scores, k)
  top_ids = jnp.take_along_axis(all_ids, pos, axis=1)
  return jnp.where(top == -jnp.inf, -1, top_ids), top


def over_sessions(batched_fn, mesh: Mesh):
  """``batched_fn`` (every input and output with a leading session axis)
  with that axis split over the mesh's ``session`` axis, each device running
  its share; jitted. On a CPU this is how both cores get work: XLA:CPU runs
  a batched sort or ``top_k`` on one thread, so
  ``XLA_FLAGS=--xla_force_host_platform_device_count=<cores>`` plus this
  roughly doubles fusion throughput on 2 cores. The session count must
  divide by the session shards."""
  spec = P(SESSION_AXIS)
  mapped = jax.shard_map(batched_fn, mesh=mesh, in_specs=spec, out_specs=spec,
                         check_vma=False)

  def run(*args):
    for i, x in enumerate(jax.tree.leaves(args)):
      if np.shape(x)[0] % mesh.shape[SESSION_AXIS]:
        raise ValueError(
            f'input {i} has {np.shape(x)[0]} sessions, not a multiple of the '
            f'{mesh.shape[SESSION_AXIS]} session shards')
    return jitted(*args)

  jitted = jax.jit(mapped)
  return run
