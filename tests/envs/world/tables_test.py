"""The jitted driver's host tables filled a few entries at a time hold what
a table filled at once holds, and find it the same way."""

import pathlib

from absl.testing import absltest
import numpy as np

from recovr_jax.envs.world.benchmark import words
from recovr_jax.envs.world.face import phrase_table

_NUM_TURNS = 3
_DIM = 4


class _User:
  """Words that name the decision, so that each key's entry is its own."""

  def words(self, query, turn, action, named, prefix, target):
    del target
    return f'q{query} t{turn} a{action} p{prefix} ' + ' '.join(
        f'attr{a}' for a in np.flatnonzero(named))


def _parse(user_words):
  return {len(user_words) % 3: len(user_words) % 5}


def _encode(texts):
  return np.asarray([[len(t), t.count('a'), t.count('t'), hash(t) % 7]
                     for t in texts], np.float32)


def _word_table(num_queries=4):
  return words.WordTable(_User(), np.zeros((6, 3), np.int32),
                             np.zeros(num_queries, np.int64), _NUM_TURNS,
                             parse=_parse, label=lambda w: len(w) % 4)


def _pairs(rng, n, num_queries=4):
  """``n`` distinct ``(query, key)`` decisions, sorted."""
  keys = rng.integers(0, (_NUM_TURNS + 1) * words.CODES, size=n)
  queries = rng.integers(0, num_queries, size=n)
  return sorted({(int(q), int(k)) for q, k in zip(queries, keys)})


class WordTableTest(absltest.TestCase):

  def _read(self, table, pairs, least=0):
    """Each pair's lookup: (found, mentions, negative, embedding, label)."""
    arrays = table.arrays(least)
    return [tuple(np.asarray(x).tolist() for x in words.lookup(arrays, q, k))
            for q, k in pairs]

  def test_filled_in_steps_equals_filled_at_once(self):
    pairs = _pairs(np.random.default_rng(0), 60)
    steps, once = _word_table(), _word_table()
    order = [pairs[i] for i in np.random.default_rng(1).permutation(
        len(pairs))]
    for part in np.array_split(np.arange(len(order)), 5):  # unsorted parts
      steps.add([order[i] for i in part])
      steps.arrays()  # each call sends the entries added since the last
    steps.add(order[:7])  # held already: nothing new
    once.add(pairs)
    absent = [(q, k + 1) for q, k in pairs if (q, k + 1) not in set(pairs)]
    self.assertEqual(self._read(steps, pairs + absent, 128),
                     self._read(once, pairs + absent, 128))
    found = [r[0] for r in self._read(steps, pairs + absent)]
    self.assertEqual(found, [True] * len(pairs) + [False] * len(absent))
    slot_keys = np.asarray(steps.arrays()[1])
    self.assertEqual(int((slot_keys >= 0).sum()), len(pairs))
    self.assertGreaterEqual(slot_keys.size, 2 * len(pairs))

  def test_only_new_entries_are_sent(self):
    pairs = _pairs(np.random.default_rng(7), 40)
    table = _word_table()
    table.add(pairs[:20])
    first = table.arrays(256)
    table.add(pairs[20:])
    later = table.arrays(256)
    # The same buffers, written in place: the earlier ones were donated.
    self.assertTrue(all(a.is_deleted() for a in first))
    self.assertEqual([a.shape for a in later], [a.shape for a in first])
    self.assertTrue(all(r[0] for r in self._read(table, pairs, 256)))

  def test_a_full_table_doubles_and_finds_everything(self):
    pairs = _pairs(np.random.default_rng(8), 150)
    table = _word_table()
    table.add(pairs[:50])
    self.assertEqual(table.arrays()[3].shape[0], 64)
    table.add(pairs[50:])
    self.assertEqual(table.arrays()[3].shape[0], 256)
    self.assertTrue(all(r[0] for r in self._read(table, pairs)))

  def test_each_row_is_its_keys_entry(self):
    pairs = _pairs(np.random.default_rng(2), 30)
    table = _word_table()
    table.add(pairs[::2])
    table.arrays()  # sent without embeddings, then again with them
    table.hold_embeddings(_encode, _DIM)  # the held entries encoded now
    table.add(pairs[1::2])
    for (q, k), (found, mentions, negative, embedding, label) in zip(
        pairs, self._read(table, pairs)):
      user_words = table.words(q, k)
      self.assertTrue(found)
      want = np.full(3, -1, np.int32)
      for a, v in _parse(user_words).items():
        want[a] = v
      np.testing.assert_array_equal(mentions, want)
      self.assertEqual(label, len(user_words) % 4)
      self.assertFalse(negative)
      np.testing.assert_array_equal(embedding, _encode([user_words])[0])

  def test_lookup_finds_every_entry_of_any_number_of_sessions(self):
    # Sessions past what one int32 key of (session, turn, code) could hold
    # (2^31 / (T + 1) / CODES = 32,768 at T = 3).
    many = 1_000_000
    rng = np.random.default_rng(4)
    pairs = _pairs(rng, 200, num_queries=many)
    table = _word_table(num_queries=many)
    table.add(pairs)
    arrays = table.arrays()
    for q, k in pairs[::7]:
      found, mentions, _, _, label = words.lookup(arrays, q, k)
      self.assertTrue(found)
      self.assertEqual(int(label), len(table.words(q, k)) % 4)
    held = set(pairs)
    for q, k in [(pairs[0][0], pairs[0][1] + 1), (pairs[-1][0] + 1, 0),
                 (0, 0), (many - 1, words.CODES - 1)]:
      found = words.lookup(arrays, q, k)[0]
      self.assertEqual(bool(found), (q, k) in held, (q, k))


class _CountingUser(_User):
  """``_User``, counting the words it writes."""

  def __init__(self):
    self.written = 0

  def words(self, *args):
    self.written += 1
    return super().words(*args)


class KeptWordTableTest(absltest.TestCase):
  """A word table kept in a cache file: a later table with the same file
  writes and parses nothing it holds, and holds what the first held."""

  def _table(self, store, user=None):
    return words.WordTable(user or _CountingUser(), np.zeros((6, 3), np.int32),
                           np.zeros(4, np.int64), _NUM_TURNS, parse=_parse,
                           label=lambda w: len(w) % 4, store=store)

  def test_a_later_table_writes_nothing_it_was_kept(self):
    store = pathlib.Path(self.create_tempdir().full_path) / 'words-x.npz'
    pairs = _pairs(np.random.default_rng(0), 40)
    first = self._table(store)
    self.assertEqual(first.add(pairs), len(pairs))
    self.assertEqual(first.save(), len(pairs))
    self.assertEqual(first.save(), 0)  # nothing new: not written again
    user = _CountingUser()
    later = self._table(store, user)
    self.assertLen(later, len(pairs))
    self.assertEqual(later.add(pairs), 0)
    self.assertEqual(user.written, 0)
    for got, want in zip(later.arrays(128), first.arrays(128)):
      np.testing.assert_array_equal(got, want)  # same order, same slots
    for q, k in pairs:
      self.assertEqual(later.words(q, k), first.words(q, k))
    # Unkept, a table writes every turn again (the count is not vacuous).
    fresh_user = _CountingUser()
    self.assertEqual(self._table(None, fresh_user).add(pairs), len(pairs))
    self.assertEqual(fresh_user.written, len(pairs))

  def test_a_damaged_file_is_ignored_with_a_warning(self):
    store = pathlib.Path(self.create_tempdir().full_path) / 'words-x.npz'
    pairs = _pairs(np.random.default_rng(1), 10)
    first = self._table(store)
    first.add(pairs)
    first.save()
    with np.load(store) as f:
      stored = dict(f)
    stored['mentions'] = stored['mentions'] + 1  # edited: digest fails
    with open(store, 'wb') as f:
      np.savez(f, **stored)
    with self.assertLogs(level='WARNING') as logs:
      later = self._table(store)
    self.assertLen(later, 0)
    self.assertIn('do not match their digest', '\n'.join(logs.output))
    store.write_bytes(b'not an archive')
    with self.assertLogs(level='WARNING'):
      self.assertLen(self._table(store), 0)

  def test_the_file_is_keyed_by_what_made_it(self):
    a = words.store_path('/c', 'user', 1, np.arange(3))
    self.assertEqual(a, words.store_path('/c', 'user', 1, np.arange(3)))
    self.assertNotEqual(a, words.store_path('/c', 'user', 2, np.arange(3)))
    self.assertNotEqual(a, words.store_path('/c', 'user', 1, np.arange(4)))


class DialogueTableTest(absltest.TestCase):

  def test_every_pair_found_after_growing_in_steps(self):
    rng = np.random.default_rng(3)
    word_table = _word_table()
    decided = _pairs(rng, 80)
    word_table.add(decided)
    dialogues = words.DialogueTable(['m0', 'm1', 'm2', 'm3'], word_table,
                                        _encode, _DIM)
    # A root (session) and one of its decisions.
    pairs = sorted({(q, k) for q, k in decided})
    for part in np.array_split(np.arange(len(pairs)), 6):
      dialogues.add([pairs[i] for i in part])
      tables = dialogues.arrays()  # the slots grow on the way
    self.assertGreater(tables[0].shape[0], 2 * len(pairs))
    for parent, word in pairs:
      found, node, row = words.lookup_dialogue(tables, 4, parent, word)
      self.assertTrue(found)
      texts = dialogues.texts(int(node))
      self.assertEqual(texts, (f'm{parent}', word_table.words(parent, word)))
      np.testing.assert_array_equal(
          row, _encode([words.SEPARATOR.join(texts)])[0])
    # A child's child: its words are its root session's.
    (q, k), (_, k2) = [p for p in pairs if p[0] == 1][:2]
    child = int(words.lookup_dialogue(tables, 4, q, k)[1])
    dialogues.add([(child, k2)])
    found, node, _ = words.lookup_dialogue(dialogues.arrays(), 4, child,
                                               k2)
    self.assertTrue(found)
    self.assertEqual(dialogues.texts(int(node)),
                     ('m1', word_table.words(1, k), word_table.words(1, k2)))
    found, node, _ = words.lookup_dialogue(dialogues.arrays(), 4, 2,
                                               int(pairs[0][1]) + 1)
    self.assertFalse(found)
    self.assertEqual(int(node), 2)


class KeptDialogueTableTest(absltest.TestCase):

  def test_a_later_table_holds_every_node_with_its_id(self):
    folder = pathlib.Path(self.create_tempdir().full_path)
    rng = np.random.default_rng(5)
    decided = _pairs(rng, 30)

    def tables(calls):
      table = words.WordTable(_User(), np.zeros((6, 3), np.int32),
                              np.zeros(4, np.int64), _NUM_TURNS,
                              parse=_parse, store=folder / 'words.npz')
      table.add(decided)

      def encode(texts):
        calls.append(len(texts))
        return _encode(texts)
      return table, words.DialogueTable(['m0', 'm1', 'm2', 'm3'], table,
                                        encode, _DIM,
                                        store=folder / 'dialogues.npz')
    calls = []
    word_table, first = tables(calls)
    first.add(decided)
    child = first.arrays()
    (q, k), (_, k2) = [p for p in decided if p[0] == 1][:2]
    node = int(words.lookup_dialogue(child, 4, q, k)[1])
    first.add([(node, k2)])  # a child's child
    word_table.save()
    self.assertEqual(first.save(), len(decided) + 1)
    self.assertEqual(first.save(), 0)
    calls = []
    _, later = tables(calls)
    self.assertEqual(calls, [len(decided) + 1])  # every node, one call
    self.assertEqual(later.add(decided + [(node, k2)]), 0)
    self.assertEqual(calls, [len(decided) + 1])  # nothing encoded again
    for got, want in zip(later.arrays(), first.arrays()):
      np.testing.assert_array_equal(got, want)
    for n in range(4, 4 + len(later)):
      self.assertEqual(later.texts(n), first.texts(n))

  def test_nodes_whose_words_are_missing_are_ignored(self):
    folder = pathlib.Path(self.create_tempdir().full_path)
    table = _word_table()
    decided = _pairs(np.random.default_rng(6), 5)
    table.add(decided)
    first = words.DialogueTable(['m0', 'm1', 'm2', 'm3'], table, _encode,
                                _DIM, store=folder / 'dialogues.npz')
    first.add(decided)
    first.save()
    with self.assertLogs(level='WARNING') as logs:
      later = words.DialogueTable(['m0', 'm1', 'm2', 'm3'], _word_table(),
                                  _encode, _DIM,
                                  store=folder / 'dialogues.npz')
    self.assertLen(later, 0)
    self.assertIn('KeyError', '\n'.join(logs.output))


class PhraseTableTest(absltest.TestCase):

  def test_index_and_rows_after_adds(self):
    table = phrase_table.PhraseTable(_encode, _DIM)
    first = table.arrays()
    table.add([5, 9, 5, 0])
    self.assertEqual(table.missing([9, 11, 5, 11, phrase_table.NUM_CODES]),
                     [11])
    table.add(np.array([11, 7]))
    index, rows = map(np.asarray, table.arrays())
    self.assertEqual(rows.shape, (phrase_table.MIN_ROWS, _DIM))
    for c in (5, 9, 11, 7):
      np.testing.assert_array_equal(
          rows[index[c]], _encode([phrase_table.phrase_text(c)])[0])
    self.assertEqual(index[0], 0)
    self.assertEqual(index[phrase_table.NUM_CODES], 0)
    self.assertEqual(int((index >= 0).sum()), 6)
    # The arrays handed out before the adds were written in place.
    self.assertTrue(all(a.is_deleted() for a in first))

  def test_a_full_table_doubles(self):
    table = phrase_table.PhraseTable(_encode, _DIM)
    codes = np.arange(1, phrase_table.MIN_ROWS + 5)
    table.add(codes)
    index, rows = map(np.asarray, table.arrays())
    self.assertEqual(rows.shape[0], 2 * phrase_table.MIN_ROWS)
    for c in (1, phrase_table.MIN_ROWS - 1, phrase_table.MIN_ROWS + 4):
      np.testing.assert_array_equal(
          rows[index[c]], _encode([phrase_table.phrase_text(c)])[0])


if __name__ == '__main__':
  absltest.main()


class KeptByNumericsTest(absltest.TestCase):

  def test_a_gpus_word_table_is_kept_apart_from_a_cpus(self):
    # The word table keeps the user's words with their reading (a reader
    # may read through MiniLM): a table made under other numerics (a GPU, a
    # TF32 run: encoders.numerics) is kept under another name; on a CPU the
    # name is as before.
    from unittest import mock  # pylint: disable=g-import-not-at-top
    from recovr_jax import methods  # pylint: disable=g-import-not-at-top
    from recovr_jax.envs.world.face import traced_face  # pylint: disable=g-import-not-at-top
    from recovr_jax.envs.world.models import encoders  # pylint: disable=g-import-not-at-top
    from recovr_jax.envs.world.user import simulated_user  # pylint: disable=g-import-not-at-top
    from recovr_jax.protocol import ranking  # pylint: disable=g-import-not-at-top
    from tests.helpers import toy_world  # pylint: disable=g-import-not-at-top
    _, env, _ = toy_world.env_for('sum')
    config = toy_world.jit_config(
        methods.make('recovr'), ranking.LoopConfig(
            num_turns=3, list_length=20, num_ids=len(env.gallery)),
        simulated_user.UserConfig(), 'sum')
    cache = self.create_tempdir().full_path
    store = lambda: traced_face.word_table(
        traced_face.prepare(env, cache_dir=cache), config, 0).store
    on_cpu = store()
    self.assertIsNotNone(on_cpu)
    self.assertEqual(store(), on_cpu)
    with mock.patch.object(encoders, 'numerics', return_value={
        'backend': 'gpu', 'matmul': 'default'}):
      self.assertNotEqual(store(), on_cpu)
