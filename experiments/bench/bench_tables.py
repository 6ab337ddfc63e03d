r"""The jitted driver's word table: what one add of new user turns costs the
host at each table size, written in place against the whole-table rebuild
it replaced (the anchor, measured in the same run).

    python -m experiments.bench.bench_tables                 # 25k .. 400k
    python -m experiments.bench.bench_tables --sizes=100000 --dim=384

For each size N (``--sizes``) a ``WordTable`` holding N entries (an
embedding of ``--dim`` floats each, as MERLIN's answers are held) receives
``--adds`` adds of ``--new`` entries each; an add is timed from ``add``
through ``arrays()`` with its outputs ready on the device (the words are a
trivial user's, the parse and encoder trivial: what is timed is the
table's own work). The anchor does what the table did before (issue "a
sweep is device work"): the same columns kept sorted on the host, the new
rows ``np.insert``ed into each, and every column uploaded again.

It prints, per size, milliseconds per add for both and the ratio anchor /
now; an add now should cost the same at every size (no term in N). The
JSON goes to ``--output_json`` (default ``results/bench_tables.json``).
"""

import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

from experiments.bench import bench_common
from recovr_jax.envs.world.benchmark import words

_SIZES = flags.DEFINE_list('sizes', ['25000', '100000', '400000'],
                           'Table sizes (entries held before the adds).')
_DIM = flags.DEFINE_integer('dim', 384, 'Floats per entry\'s embedding.')
_ADDS = flags.DEFINE_integer('adds', 20, 'Adds timed per size and method.')
_NEW = flags.DEFINE_integer('new', 200, 'New entries per add (a turn\'s '
                            'new user turns at a few thousand sessions).')
_OUTPUT_JSON = flags.DEFINE_string('output_json', 'results/bench_tables.json',
                                   'Where the results go.')

_TURNS = 5


class _User:
  def words(self, query, turn, action, named, prefix, target):
    del named, target
    return f'{query} {turn} {action} {prefix}'


def _pairs(start, count):
  """``count`` distinct decisions, query-major (as sessions add them)."""
  n = np.arange(start, start + count)
  return list(zip((n // _TURNS).tolist(), (n % _TURNS).tolist()))


def _table(size, dim, queries):
  table = words.WordTable(_User(), np.zeros((4, 7), np.int32),
                          np.zeros(queries, np.int64), _TURNS,
                          parse=lambda w: {}, label=None)
  table.hold_embeddings(lambda texts: np.zeros((len(texts), dim)), dim)
  table.add(_pairs(0, size))
  return table


def _now(size, dim, adds, new):
  least = size + adds * new
  table = _table(size, dim, least // _TURNS + 1)
  jax.block_until_ready(table.arrays(least))
  times = []
  for a in range(adds):
    start = time.perf_counter()
    table.add(_pairs(size + a * new, new))
    jax.block_until_ready(table.arrays(least))
    times.append(time.perf_counter() - start)
  return times


def _anchor(size, dim, adds, new):
  """The table before: sorted host columns, ``np.insert`` per add, every
  column uploaded again."""
  columns = [np.arange(size, dtype=np.int32) // _TURNS,
             np.arange(size, dtype=np.int32) % _TURNS,
             np.full((size, 7), -1, np.int32), np.zeros(size, bool),
             np.zeros((size, dim), np.float32), np.full(size, -1, np.int32)]
  times = []
  for a in range(adds):
    start = time.perf_counter()
    pairs = _pairs(size + a * new, new)
    added = [np.asarray([q for q, _ in pairs], np.int32),
             np.asarray([k for _, k in pairs], np.int32),
             np.full((new, 7), -1, np.int32), np.zeros(new, bool),
             np.zeros((new, dim), np.float32), np.full(new, -1, np.int32)]
    span = np.int64(_TURNS + 1) * words.CODES
    held = columns[0].astype(np.int64) * span + columns[1]
    at = np.searchsorted(held, [q * span + k for q, k in pairs])
    columns = [np.insert(c, at, x, axis=0) for c, x in zip(columns, added)]
    jax.block_until_ready([jnp.asarray(c) for c in columns])
    times.append(time.perf_counter() - start)
  return times


def main(argv):
  del argv
  bench_common.full_speed_blas()
  sizes = bench_common.list_values(_SIZES, bench_common.positive_int)
  rows = []
  for size in sizes:
    now = _now(size, _DIM.value, _ADDS.value, _NEW.value)
    anchor = _anchor(size, _DIM.value, _ADDS.value, _NEW.value)
    row = dict(entries=size, new_per_add=_NEW.value, dim=_DIM.value,
               now_ms=1e3 * float(np.median(now)),
               anchor_ms=1e3 * float(np.median(anchor)))
    row['anchor_over_now'] = row['anchor_ms'] / row['now_ms']
    rows.append(row)
    bench_common.log(
        f'{size:>9,} entries: add of {_NEW.value} now {row["now_ms"]:8.2f} '
        f'ms, rebuilt (anchor) {row["anchor_ms"]:8.1f} ms, '
        f'{row["anchor_over_now"]:7.1f}x')
  growth = rows[-1]['now_ms'] / rows[0]['now_ms']
  bench_common.log(f'an add at {sizes[-1]:,} entries costs {growth:.2f}x one '
                   f'at {sizes[0]:,} (table {sizes[-1] / sizes[0]:.0f}x)')
  bench_common.write_results(_OUTPUT_JSON.value, dict(
      adds=_ADDS.value, rows=rows,
      now_growth=growth))


if __name__ == '__main__':
  app.run(main)
