"""The jitted runner, and the one boundary between the host and the device:
a batch's turns run stage by stage (``jit_loop``'s table), each stage one
program call, the host's work between them reading NumPy arrays that
``to_host`` copied (the only copies from the device in a run).

One turn of ``run``:

==========  =========================  ===========================  =====
call        on the device              then on the host             reads
==========  =========================  ===========================  =====
``hear``    the stop rule, the         ``Filler.heard``: writes,    asks
            users' decisions           parses, encodes the words
                                       the tables lack
``decide``  the reading, the           ``Filler.planned``: encodes  asks
            methods' plans             the phrases the tables lack
``show``    the ranking, the           (``Filler.shown`` when the   (outs)
            question, the record       filler ``READS_LISTS``)
==========  =========================  ===========================  =====

Turn 0 is ``start`` (the host: ``planned``) then ``show``. So a turn copies
two small arrays per session to the host (three with ``READS_LISTS``), each
turn's stages run once, and the turns' outputs stay on the device until
the batch ends (one copy, ``_Turns.trace``).
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


# Per stage: its function and how many per-session arguments follow the
# queries.
_STAGES = dict(start=(jit_loop.start_batch, 0),
               start_show=(jit_loop.start_show_batch, 1),
               hear=(jit_loop.hear_batch, 1),
               decide=(jit_loop.decide_batch, 2),
               show=(jit_loop.show_batch, 2))


@functools.lru_cache(maxsize=16)
def _over_sessions(chunk_size, mesh, data_structure=None, num_rows=None):
  """``jit_loop``'s stages (``_STAGES``) with the sessions (and what is
  per session) split over the mesh's session axis (the config, a pytree,
  is their first argument, replicated).
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

  def mapped(name):
    fn, per_session = _STAGES[name]
    kwargs = dict(split=rows)
    if name in ('hear', 'decide', 'show'):
      kwargs['chunk_size'] = chunk_size
    # (config, data, tables, composer_params, seed_key, turn, queries, ...)
    in_specs = (shared, data_spec, shared, shared, shared, shared,
                split) + (split,) * per_session
    return jax.jit(jax.shard_map(functools.partial(fn, **kwargs), mesh=mesh,
                                 in_specs=in_specs, out_specs=split,
                                 check_vma=False))
  return {name: mapped(name) for name in _STAGES}


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


_KEPT = dict(start=jit_loop.start, start_show=jit_loop.start_show,
             hear=jit_loop.hear, decide=jit_loop.decide, show=jit_loop.show,
             live_decide=jit_loop.live_decide, live_show=jit_loop.live_show)

MIN_BUCKET = 16  # the fewest sessions a live bucket holds


def bucket(live: int, total: int) -> int:
  """The rows of the bucket that holds ``live`` sessions of a batch of
  ``total``: the next power of two, at least ``MIN_BUCKET``, at most
  ``total`` (so a run compiles at most a handful of sizes)."""
  return min(total, max(MIN_BUCKET, 1 << max(live - 1, 0).bit_length()))


class _Programs:
  """``jit_loop``'s stages of one run, on the default device or over
  ``mesh`` (the batch's data, parameters, key and queries placed once;
  the tables at every call)."""

  def __init__(self, env, config, queries, seed_key, chunk_size, mesh):
    self.env, self.config, self.chunk_size = env, config, chunk_size
    self.mesh = mesh
    self.num, self.padding = len(queries), 0
    if mesh is None:
      self.data, self.params = env.data, env.composer_params
      self.key, self.queries = seed_key, jnp.asarray(queries)
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
    """The session-turns a ``show`` scores when ``active`` ``[S]`` (its
    ``hear``'s) are still searching: every session at turn 0 and without
    chunks, else the chunks of searching sessions on each device."""
    if active is None or self.chunk_size is None:
      return self.num + self.padding
    shards = 1 if self.mesh is None else self.mesh.shape[
        sharding.SESSION_AXIS]
    active = np.concatenate([active, np.repeat(active[-1:], self.padding)])
    per_shard = active.reshape(shards, -1).sum(axis=1)
    _, chunk = session.chunks(len(active) // shards, self.chunk_size)
    return int(sum(-(-n // chunk) for n in per_shard) * chunk)

  def __call__(self, stage: str, tables, turn: int, *per_session):
    """Stage ``stage`` (``_STAGES``) of turn ``turn`` on ``tables`` with
    the batch's per-session arrays ``per_session`` (as earlier stages gave
    them): its results, where they were computed. Under a profile the
    call is timed as the run's device time (``profiling.DEVICE``),
    blocked on until its results are ready."""
    with profiling.part(profiling.DEVICE):
      return profiling.sync(self._call(stage, tables, turn, per_session))

  def _call(self, stage, tables, turn, per_session):
    turn = np.int32(turn)
    kwargs = ({} if stage.startswith(('start', 'live')) else
              dict(chunk_size=self.chunk_size))
    if self.mesh is None:
      return _KEPT[stage](self.config, self.data, tables, self.params,
                          self.key, turn, self.queries, *per_session,
                          **kwargs)
    # Replicated on every device of the mesh (a copy per device); the mesh
    # may span several processes, each passing the same values. The
    # config's traced fields travel as Python scalars (the same on every
    # process, replicated by jit).
    tables = sharding.place(tables, self.mesh)
    return self.fns[stage](self.config, self.data, tables, self.params,
                           self.key, turn, self.queries, *per_session)

  def to_host(self, tree):
    """``tree``'s arrays as NumPy arrays, whole on every process, for the
    batch's sessions (a mesh's padding dropped): the run's one way from
    the device to the host."""
    tree = sharding.gather(tree) if self.mesh is not None else (
        jax.device_get(tree))
    return jax.tree.map(lambda x: np.asarray(x)[:self.num], tree)


# The per-turn fields of ``_turn_outputs`` that ``JitTrace`` keeps as they
# are, with their types.
_PER_TURN = dict(shown=np.int32, scores=np.float32, active=bool,
                 action=np.int32, sigma=np.int32, search=np.int32,
                 edit=np.int32, fired=bool, asked=np.int32,
                 questions=np.int32)


class _Turns:
  """The trace of a batch, turn by turn: turn ``t``'s outputs (``set``),
  where they were computed; ``trace`` copies them to the host once and
  stacks them."""

  def __init__(self):
    self.turns = []

  def set(self, turn: int, outs: dict):
    assert turn == len(self.turns)
    self.turns.append(outs)

  def trace(self, programs: _Programs) -> traced.JitTrace:
    turns = programs.to_host(self.turns)
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


def run(env: traced.Environment, config: traced.JitConfig, sessions,
        seed: int, log=None, chunk_size: int | None = DEFAULT_CHUNK_SIZE,
        mesh=None, pad_to: int | None = None,
        buckets: bool = False,
        run_sessions: int | None = None) -> traced.JitTrace:
  """Runs ``sessions`` (query indices) turn by turn as the module's table
  says, and returns their trace (``jit_loop.simulate_batch``'s on the
  tables the run ends with).

  ``buckets`` (on one device, without chunks): each feedback turn's
  ``decide`` and ``show`` run only on the sessions still searching (``hear``'s
  ``active``), gathered into a bucket of ``bucket(live, S)`` rows, and
  scatter their results back (``jit_loop.live_show_batch``); the same
  results with less device work where many sessions have stopped.

  ``pad_to``: fewer sessions than this (a run's partial last batch) are run
  padded to it with copies of the last session, whose results are dropped, so
  the batch has the full batches' shapes and reuses their compiled program
  (each session's results do not depend on the others). ``run_sessions``:
  the sessions of the whole run (default: these), which the tables are
  sized for from the start, so that every batch and every method, in a
  first run and in a rerun that finds the tables kept, calls the same
  programs. ``chunk_size``: see
  ``jit_loop``. ``mesh``: a ``sharding.make_mesh`` mesh (it may
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
  filler = env.filler(config, seed, len(sessions), run_sessions)
  programs = _Programs(env, config, sessions, jax.random.key(seed),
                       chunk_size, mesh)
  reads_lists = getattr(filler, 'READS_LISTS', False)
  buckets = buckets and mesh is None and chunk_size is None
  turns = _Turns()

  def report(turn, *added):
    added = ', '.join(a for a in added if a)
    if added and log is not None:
      log(f'turn {turn}: {added}')

  started, asks = programs('start', filler.arrays(), 0)
  asks = programs.to_host(asks)
  report(0, filler.planned(0, np.ones(len(sessions), bool), asks['needed']))
  profiling.count(ranking.SCORED, programs.scored(None))
  carry, outs = programs('start_show', filler.arrays(), 0, started)
  for turn in range(config.loop.num_turns + 1):
    if turn:
      heard, asks = programs('hear', filler.arrays(), turn, carry)
      asks = programs.to_host(asks)
      active = asks.pop('active')
      words = filler.heard(turn, active, asks)
      if buckets:
        live = np.flatnonzero(active).astype(np.int32)
        rows = np.full(bucket(len(live), len(sessions)), len(sessions),
                       np.int32)
        rows[:len(live)] = live
        decided, asks = programs('live_decide', filler.arrays(), turn, carry,
                                 heard, rows)
        needed = np.zeros((len(sessions), 2), np.int32)
        needed[live] = programs.to_host(asks)['needed'][:len(live)]
      else:
        decided, asks = programs('decide', filler.arrays(), turn, carry,
                                 heard)
        needed = programs.to_host(asks)['needed']
      report(turn, words, filler.planned(turn, active, needed))
      profiling.count(ranking.SCORED, len(rows) if buckets
                      else programs.scored(active))
      carry, outs = programs('live_show' if buckets else 'show',
                             filler.arrays(), turn, carry, decided,
                             *([rows] if buckets else []))
    turns.set(turn, outs)
    if reads_lists:
      filler.shown(turn, programs.to_host(outs))
  trace = turns.trace(programs)
  return jax.tree.map(lambda x: x[:num], trace)
