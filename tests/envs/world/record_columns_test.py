"""The jitted world face's records, built a column at a time
(``traced_face.batch_result``, ``records.RecordColumns``), are the records
its former loop built a session and turn at a time (the oracle here): the
same dicts, keys in the same order; the batch file and the trajectories
read them back the same."""

import dataclasses
import json
import pathlib

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from recovr_jax.core import demotion
from recovr_jax.envs.world.benchmark import generator
from recovr_jax.envs.world.face import phrase_table
from recovr_jax.envs.world.face import traced_face
from recovr_jax.envs.world.user import simulated_user
from recovr_jax import methods
from recovr_jax.protocol import dialogue
from recovr_jax.protocol import environment
from recovr_jax.protocol import plan
from recovr_jax.protocol import records
from recovr_jax.run import ask_scores
from recovr_jax.run import batches
from recovr_jax.run import trajectories
from recovr_jax import trajectory_files
from tests.helpers import toy_world


def _oracle(env, trace, table, sessions):
  """The loop ``batch_result`` ran before its records were columns."""
  own = trace.own
  names = generator.attribute_names(np.shape(own['mentioned'])[-1])
  questioned = (np.diff(np.asarray(trace.questions), axis=1,
                        prepend=0) > 0).tolist()
  active, action, sigma, fired, asked, search, edit = (
      np.asarray(x).tolist() for x in (
          trace.active, trace.action, trace.sigma, trace.fired,
          trace.asked, trace.search, trace.edit))
  mentioned = np.asarray(own['mentioned']).tolist()
  queries, word_keys = (np.asarray(own[k]).tolist() for k in ('query',
                                                              'word'))
  out = []
  for i in range(len(active)):
    first = (None if sessions is None else
             env.modification_texts[int(sessions[i])])
    rows = [dict(plan.start_record(first), asked=None)]
    for t in range(len(active[i])):
      if not active[i][t]:
        rows.append(dict(plan.stopped_record(t + 1), asked=None,
                         questioned=False))
        continue
      rows.append(plan.turn_record(
          t + 1, simulated_user.ACTIONS[action[i][t]],
          (table.words(queries[i][t], word_keys[i][t])
           if table is not None else None),
          sigma[i][t], fired[i][t], None,
          mentioned=generator.value_names(
              {a: v for a, v in enumerate(mentioned[i][t]) if v >= 0},
              len(names)),
          asked=None, questioned=questioned[i][t],
          question_attribute=(names[asked[i][t]] if asked[i][t] >= 0
                              else None),
          search=phrase_table.phrase_text(search[i][t]),
          edit=phrase_table.phrase_text(edit[i][t] + traced_face.NUM_CODES)))
    out.append(rows)
  return out


class RecordColumnsTest(parameterized.TestCase):

  @parameterized.parameters(('recovr', True), ('ivr', False),
                            ('history_rewrite', True))
  def test_the_columns_are_the_loops_records(self, name, with_table):
    _, env, jit_env = toy_world.env_for('sum')
    user_config = simulated_user.UserConfig(draws='jax', drop_rate=0.2)
    method = methods.make(name, toy_world.NO_ASK)
    _, trace, config = toy_world.run_both(env, jit_env, method, user_config,
                                          None, seed=3)
    # Sessions that stopped (the toy world's find their targets late).
    active = np.array(trace.active)
    active[0, 1:] = False
    active[-1, 2:] = False
    trace = dataclasses.replace(trace, active=active)
    table = (traced_face.word_table(jit_env, config, 3) if with_table
             else None)
    sessions = np.arange(len(trace.displayed)) % len(
        jit_env.modification_texts)
    got = traced_face.batch_result(jit_env, trace, table, sessions).records
    self.assertIsInstance(got, records.RecordColumns)
    want = _oracle(jit_env, trace, table, sessions)
    # Equal, with keys in the same order (json.dumps keeps their order).
    self.assertEqual(json.dumps(list(got)), json.dumps(want))
    self.assertEqual(got[-1], want[-1])
    self.assertEqual(got[1:3], want[1:3])
    np.testing.assert_array_equal(
        records.fired(got, len(want[0]) - 1),
        records.fired(want, len(want[0]) - 1))

  def test_the_batch_file_and_the_trajectories_read_them_back(self):
    _, env, jit_env = toy_world.env_for('sum')
    user_config = simulated_user.UserConfig(draws='jax', drop_rate=0.2)
    method = methods.make('recovr', toy_world.NO_ASK)
    _, trace, config = toy_world.run_both(env, jit_env, method, user_config,
                                          None, seed=3)
    table = traced_face.word_table(jit_env, config, 3)
    sessions = np.arange(len(trace.displayed))
    result = traced_face.batch_result(jit_env, trace, table, sessions)
    out = pathlib.Path(self.create_tempdir().full_path)
    batches.save(out, 'recovr', 0, result, sessions, {}, {}, 'id')
    loaded, errors, _ = batches.load(
        out, 'recovr', 0, np.shape(result.displayed), sessions, 'id',
        10 ** 6)
    self.assertEqual(errors, {})
    self.assertIsInstance(loaded.records, records.RecordColumns)
    self.assertEqual(list(loaded.records), list(result.records))
    # The Parquet file built from the columns is the one built from the
    # documents (the same table), and reads back as them.
    env_like = type('E', (), {'reference': sessions, 'target': sessions})
    ids = lambda i: f'v{i}' if i >= 0 else None
    collected = trajectories.Trajectories()
    for name in ('recovr', 'ivr'):
      collected.add(trajectories.block(name, sessions, env_like, result,
                                       {'1': 'boom'}, ids))
    rows = list(collected)
    columns = collected.parquet_columns()
    self.assertIsNotNone(columns)
    from_columns = trajectory_files._table(columns)
    from_rows = trajectory_files._table(trajectory_files._columns(rows))
    self.assertEqual(from_columns.schema, from_rows.schema)
    self.assertEqual(from_columns.schema.metadata, from_rows.schema.metadata)
    self.assertTrue(from_columns.equals(from_rows))
    trajectory_files.write(out, collected, 'parquet')
    self.assertEqual(trajectory_files.read(out), rows)
    # What asking's scores read: the documents' fields, only those.
    light = collected.documents(ask_scores.READS)
    self.assertEqual(light, [
        dict({k: v for k, v in r.items()
              if k not in ('reference_id', 'target_id')},
             turns=[{k: v for k, v in t.items() if k in ask_scores.READS}
                    for t in r['turns']]) for r in rows])
    self.assertIn('question_attribute', light[0]['turns'][1])
    joined = collected.documents(dialogue.READS, ['ivr'])
    self.assertLen(joined, len(sessions))
    self.assertEqual([[{k: t[k] for k in dialogue.READS} for t in r['turns']]
                      for r in joined],
                     [[{k: t[k] for k in dialogue.READS} for t in r['turns']]
                      for r in rows if r['method'] == 'ivr'])
    self.assertEqual(collected.actions()[('ivr', 2)],
                     [t.get('action') for t in rows[len(sessions) + 2]
                      ['turns']])


class EmptyPlacesTest(absltest.TestCase):

  def test_a_list_with_an_empty_place_is_json_text_in_both_ways(self):
    s, w = 3, 3
    displayed = np.tile(np.arange(4, dtype=np.int32), (s, w, 1))
    displayed[1, 2, 3] = -1
    columns = {'turn': np.tile(np.arange(w), s).tolist(),
               'action': [None, 'modify', 'stopped'] * s,
               'sigma': [None, demotion.SIGMAS[0], None] * s,
               'rank_cap_fired': [False, True, False] * s}
    present = {'rank_cap_fired': [False, True, False] * s}
    result = environment.BatchResult(
        displayed=displayed, top_scores=np.zeros((s, w), np.float32),
        records=records.RecordColumns(s, w, columns, present),
        scores=np.full((s, w, 4), 0.5, np.float32))
    env_like = type('E', (), {'reference': np.arange(s),
                              'target': np.arange(s)})
    collected = trajectories.Trajectories()
    collected.add(trajectories.block('m', np.arange(s), env_like, result, {},
                                     lambda i: f'v{i}' if i >= 0 else None))
    from_columns = trajectory_files._table(collected.parquet_columns())
    from_rows = trajectory_files._table(
        trajectory_files._columns(list(collected)))
    self.assertTrue(from_columns.equals(from_rows))
    self.assertEqual(from_columns.schema.metadata, from_rows.schema.metadata)
    self.assertIn('top10_ids', json.loads(
        from_rows.schema.metadata[b'recovr_trajectories'])['json_columns'])


if __name__ == '__main__':
  absltest.main()
