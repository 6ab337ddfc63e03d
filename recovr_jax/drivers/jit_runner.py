"""The jitted runner: a batch's turns run one program call at a time, the
tables filled between a turn's probe and its ranking (``run``), on one
device or over a mesh.

One turn of ``run`` (the start, then each feedback turn), from the last
turn's carry (``jit_loop.start_batch`` / ``turn_batch``):

=========  ===================================  ==============================
state      what runs                            next
=========  ===================================  ==============================
probe      the turn's user and plan, no         every session read only held
           ranking (``rank`` false)             entries (a face that
                                                ``TELLS_HELD``): it ranked
                                                too -> settle; else -> fill
fill       ``Filler.fill``: the host adds the   ``Fill.again`` -> probe (at
           words, dialogues or texts the turn   most ``MAX_PROBES``); else
           read and the tables lacked           -> rank
rank       the turn with its ranking            -> settle
           (``rank`` true), on the filled
           tables
settle     ``Filler.settled`` sees the turn's   the next turn's probe
           lists, final
=========  ===================================  ==============================

So each session's turn is ranked once, and no settled turn runs again.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
import numpy as np

from recovr_jax import profiling
from recovr_jax.core import sharding
from recovr_jax.drivers import jit_loop
from recovr_jax.protocol import ranking
from recovr_jax.protocol import session
from recovr_jax.protocol import traced

DEFAULT_CHUNK_SIZE = 64  # sessions per vmapped chunk of a compacted turn


def chunk_size(flag: int | None, backend: str | None = None) -> int | None:
  """``run``'s ``chunk_size`` for ``--jit_chunk_size`` ``flag`` on
  ``backend`` (default JAX's): None picks by backend, ``DEFAULT_CHUNK_SIZE``
  on a CPU and no chunks on an accelerator (each chunk's ``lax.cond`` there
  has the host read its predicate: thousands of reads a turn at 100,000
  sessions); 0 is no chunks."""
  if flag is None:
    backend = backend or jax.default_backend()
    return DEFAULT_CHUNK_SIZE if backend == 'cpu' else None
  return flag or None


@functools.lru_cache(maxsize=16)
def _over_sessions(chunk_size, mesh, data_structure=None, num_rows=None):
  """``jit_loop``'s ``(start_batch, turn_batch)`` with the sessions (and
  the carry) split over the mesh's session axis (the config, a pytree, is
  their first argument, replicated).
  ``data_structure`` (the data's treedef) and ``num_rows``: the gallery's
  rows are split over the mesh's gallery axis (``num_rows`` real rows);
  otherwise everything but the sessions is replicated."""
  shared, split = P(), P(sharding.SESSION_AXIS)
  data_spec, rows = shared, None
  if data_structure is not None:
    data_spec = dataclasses.replace(
        jax.tree.unflatten(data_structure, [P()] * data_structure.num_leaves),
        gallery=P(sharding.GALLERY_AXIS, None))
    rows = ranking.GallerySplit.of(sharding.GALLERY_AXIS, num_rows,
                                   mesh.shape[sharding.GALLERY_AXIS])

  def first(config, *args):
    return jit_loop.start_batch(config, *args, split=rows,
                                session_axis=sharding.SESSION_AXIS)

  def later(config, *args):
    return jit_loop.turn_batch(config, *args, chunk_size=chunk_size,
                               split=rows, session_axis=sharding.SESSION_AXIS)

  def mapped(fn, in_specs):
    return jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=in_specs,
                                 out_specs=split, check_vma=False))
  return (mapped(first, (shared, data_spec, shared, shared, split, shared)),
          mapped(later, (shared, data_spec, shared, shared, split, shared,
                         split, shared, shared)))


def _place_split_gallery(data, mesh):
  """``data`` replicated on ``mesh`` but its gallery, whose rows are split
  over the gallery axis as ``ranking.GallerySplit`` lays them out (each
  process places only the rows of its own devices)."""
  gallery = np.asarray(data.gallery, np.float32)
  split = ranking.GallerySplit.of(sharding.GALLERY_AXIS, gallery.shape[0],
                                  mesh.shape[sharding.GALLERY_AXIS])

  def rows(index):
    shard = (index[0].start or 0) // split.rows
    ids, real = split.global_ids(shard, xp=np)
    return np.where(real[:, None], gallery[np.where(real, ids, 0)], 0.0
                    ).astype(np.float32)
  split_gallery = jax.make_array_from_callback(
      (split.shards * split.rows, gallery.shape[1]),
      NamedSharding(mesh, P(sharding.GALLERY_AXIS, None)), rows)
  rest = sharding.place(dataclasses.replace(data, gallery=None), mesh)
  return dataclasses.replace(rest, gallery=split_gallery)


class _Programs:
  """``start_batch`` and ``turn_batch`` of one run, on the default device
  or over ``mesh`` (the batch's data, parameters, key and queries placed
  once; the tables at every call)."""

  def __init__(self, env, config, queries, seed_key, chunk_size, mesh):
    self.env, self.config, self.chunk_size = env, config, chunk_size
    self.mesh, self.seed_key = mesh, seed_key
    self.num, self.padding = len(queries), 0
    if mesh is None:
      self.queries = jnp.asarray(queries)
      return
    if mesh.shape[sharding.GALLERY_AXIS] > 1:
      self.data = _place_split_gallery(env.data, mesh)
      self.fns = _over_sessions(chunk_size, mesh,
                                jax.tree.structure(env.data),
                                int(env.data.gallery.shape[0]))
    else:
      self.data = sharding.place(env.data, mesh)
      self.fns = _over_sessions(chunk_size, mesh)
    self.params, self.key = sharding.place((env.composer_params, seed_key),
                                           mesh)
    # Padded to a multiple of the session shards.
    shards = mesh.shape[sharding.SESSION_AXIS]
    self.padding = -len(queries) % shards
    self.queries = sharding.place(np.concatenate([queries, np.broadcast_to(
        queries[-1:], (self.padding,))]), mesh, P(sharding.SESSION_AXIS))

  def scored(self, active) -> int:
    """The session-turns a ranked turn scores when ``active`` ``[S]`` (its
    probe's) are still searching: every session at turn 0 and without
    chunks, else the chunks of searching sessions on each device."""
    if active is None or self.chunk_size is None:
      return self.num + self.padding
    shards = 1 if self.mesh is None else self.mesh.shape[
        sharding.SESSION_AXIS]
    active = np.concatenate([active, np.repeat(active[-1:], self.padding)])
    per_shard = active.reshape(shards, -1).sum(axis=1)
    _, chunk = session.chunks(len(active) // shards, self.chunk_size)
    return int(sum(-(-n // chunk) for n in per_shard) * chunk)

  def __call__(self, tables, carry, turn: int, rank: bool):
    """Turn ``turn`` (0: the start) from ``carry``: ``(carry, outputs)``,
    the outputs where they were computed on one device, NumPy arrays
    whole on every process over a mesh (sessions past the batch's, the
    mesh's padding, dropped). Under a profile the call is timed as the
    run's device time (``profiling.DEVICE``), blocked on until its outputs
    are ready."""
    with profiling.part(profiling.DEVICE):
      return profiling.sync(self._call(tables, carry, turn, rank))

  def _call(self, tables, carry, turn, rank):
    rank = np.bool_(rank)
    if self.mesh is None:
      if turn == 0:
        carry, outs = jit_loop.start(self.config, self.env.data, tables,
                                     self.env.composer_params, self.queries,
                                     rank)
      else:
        carry, outs = jit_loop.step(self.config, self.env.data, tables,
                                    self.env.composer_params, self.queries,
                                    self.seed_key, carry, np.int32(turn),
                                    rank, chunk_size=self.chunk_size)
    else:
      # Replicated on every device of the mesh (a copy per device); the
      # mesh may span several processes, each passing the same values. The
      # config's traced fields travel as Python scalars (the same on every
      # process, replicated by jit).
      tables = sharding.place(tables, self.mesh)
      first, later = self.fns
      if turn == 0:
        carry, outs = first(self.config, self.data, tables, self.params,
                            self.queries, rank)
      else:
        carry, outs = later(self.config, self.data, tables, self.params,
                            self.queries, self.key, carry, np.int32(turn),
                            rank)
      outs = sharding.gather(outs)
    return carry, jax.tree.map(lambda x: x[:self.num], outs)


# The per-turn fields of ``_turn_outputs`` that ``JitTrace`` keeps as they
# are, with their types.
_PER_TURN = dict(shown=np.int32, scores=np.float32, active=bool,
                 action=np.int32, sigma=np.int32, search=np.int32,
                 edit=np.int32, fired=bool, asked=np.int32,
                 questions=np.int32)


class _Turns:
  """The trace of a batch, turn by turn: turn ``t``'s outputs once ranked
  (``set``), where they were computed; ``trace`` copies them to the host
  once and stacks them."""

  def __init__(self):
    self.turns = []

  def set(self, turn: int, outs: dict):
    assert turn == len(self.turns)
    self.turns.append(outs)

  def trace(self) -> traced.JitTrace:
    turns = jax.device_get(self.turns)
    first, later = turns[0], turns[1:]

    def stacked(key, of=None):
      return np.stack([(o[key] if of is None else o[of][key])
                       for o in later], axis=1)
    if later:
      rest = {k: stacked(k) for k in _PER_TURN}
      needed = np.stack([stacked('needed_search'), stacked('needed_edit')],
                        axis=2)
      own = {k: stacked(k, 'own') for k in later[0]['own']}
    else:  # turn 0 only: the per-turn fields hold no turn (nor ``own``)
      s = first['shown'].shape[0]
      rest = {k: np.zeros((s, 0) + (first[k].shape[1:] if k in first
                                    else ()), dtype)
              for k, dtype in _PER_TURN.items()}
      needed, own = np.zeros((s, 0, 2), np.int32), {}
    scores = np.concatenate([first['scores'][:, None], rest['scores']],
                            axis=1)
    return traced.JitTrace(
        displayed=np.concatenate([first['shown'][:, None], rest['shown']],
                                 axis=1),
        top_scores=scores[:, :, 0], scores=scores, active=rest['active'],
        action=rest['action'], sigma=rest['sigma'], search=rest['search'],
        edit=rest['edit'],
        needed=np.concatenate([first['needed'][:, None], needed], axis=1),
        fired=rest['fired'], asked=rest['asked'],
        questions=rest['questions'], own=own)


# Probes of one turn before it settles (each fill adds what the turn's
# user, then its plan, read; the world's face needs at most 2: its words
# and dialogues, then the texts of the plan).
MAX_PROBES = 3


def run(env: traced.Environment, config: traced.JitConfig, sessions,
        seed: int, log=None, chunk_size: int | None = DEFAULT_CHUNK_SIZE,
        mesh=None, pad_to: int | None = None) -> traced.JitTrace:
  """Runs ``sessions`` (query indices) turn by turn as the module's state
  table says, and returns ``jit_loop.simulate_batch``'s trace on the
  filled tables.

  ``pad_to``: fewer sessions than this (a run's partial last batch) are run
  padded to it with copies of the last session, whose results are dropped, so
  the batch has the full batches' shapes and reuses their compiled program
  (each session's results do not depend on the others). ``chunk_size``: see
  ``jit_loop.simulate_batch``. ``mesh``: a ``sharding.make_mesh`` mesh (it may
  span several processes, each calling this with the same values) whose
  ``session`` axis splits the sessions over devices and whose ``gallery``
  axis, when longer than 1, splits the gallery's rows (each device scores its
  rows; the lists merged exactly); tables, composer and the rest of the data
  are replicated. None runs on the default device. Returns the trace as NumPy
  arrays, whole on every process.
  """
  if chunk_size is not None and chunk_size < 1:
    raise ValueError(f'chunk_size must be >= 1 or None, got {chunk_size}')
  num = len(sessions)
  sessions = np.asarray(sessions, np.int32)
  if pad_to is not None and 0 < num < pad_to:
    sessions = np.concatenate([sessions, np.full(pad_to - num, sessions[-1],
                                                 np.int32)])
  filler = env.filler(config, seed, len(sessions))
  programs = _Programs(env, config, sessions, jax.random.key(seed),
                       chunk_size, mesh)
  turns, carry = _Turns(), None
  for turn in range(config.loop.num_turns + 1):
    for _ in range(MAX_PROBES):
      probed, probe = programs(filler.arrays(), carry, turn, rank=False)
      ranked = bool(np.asarray(probe.pop('ranked')).all())  # all equal
      if ranked:  # it read only held entries, and ranked
        break
      fill = filler.fill(traced.Turn(turn, probe))
      if fill.added and log is not None:
        log(f'turn {turn}: {fill.added}')
      if not fill.again:
        break
    else:  # cannot happen
      raise RuntimeError(f'turn {turn}: the tables did not settle')
    profiling.count(ranking.SCORED, programs.scored(
        np.asarray(probe['active']) if turn else None))
    if ranked:
      carry, outs = probed, probe
    else:
      carry, outs = programs(filler.arrays(), carry, turn, rank=True)
      outs.pop('ranked')
    turns.set(turn, outs)
    filler.settled(traced.Turn(turn, outs))
  trace = turns.trace()
  return jax.tree.map(lambda x: x[:num], trace)
