"""The session viewer's data and pages, on a small hand-written run."""

import dataclasses
import json
import pathlib
import tempfile

from absl.testing import absltest
from fastapi import testclient
import numpy as np

from recovr_jax import readers
from recovr_jax.run import reporting
from recovr_jax.run import run_config
from recovr_jax.study import media
from recovr_jax.study import viewer
from tests.helpers import forked

IDS = tuple(f'vid{i:02d}' for i in range(12))
TARGETS = np.array([3, 7, 9])
# [method][session][turn] the shown top 4; the target's rank follows.
SHOWN = {
    'recovr': [[[1, 3, 2, 0], [3, 1, 2, 0], [3, 1, 2, 0]],      # found at 1
               [[1, 2, 3, 4], [2, 1, 3, 4], [7, 2, 1, 3]],      # found at 2
               [[0, 9, 1, 2], [0, 1, 2, 4], [0, 1, 2, 4]]],     # drift, stuck
    'ivr': [[[1, 3, 2, 0], [1, 2, 3, 0], [3, 1, 2, 0]],
            [[1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 3, 4]],
            [[0, 9, 1, 2], [9, 0, 1, 2], [9, 0, 1, 2]]],
}


def write_run(d: pathlib.Path) -> pathlib.Path:
  """A finished two-method run of 3 sessions and 2 feedback turns."""
  d.mkdir(parents=True, exist_ok=True)
  displayed = {m: np.array(v) for m, v in SHOWN.items()}
  rows = []
  for m, shown in displayed.items():
    for s in range(3):
      turns = []
      for t in range(3):
        stopped = t > 0 and (shown[s, :t, 0] == TARGETS[s]).any()
        rec = {'turn': t, 'top10': shown[s, t].tolist(),
               'top10_ids': [IDS[i] for i in shown[s, t]],
               'top10_scores': [round(0.9 - 0.1 * k, 6) for k in range(4)],
               'feedback': f'edit of session {s}' if t == 0 else (
                   '' if stopped else f'{m} feedback {s}.{t}'),
               'question': None if t == 0 else f'{m} question {s}.{t}',
               'asked': None if stopped else f'{m} asked {s}.{t}',
               'action': None if t == 0 else ('stopped' if stopped
                                              else 'modify')}
        if t and not stopped:
          rec.update(search=f'{m} search {s}.{t}', sigma='pos',
                     keep=['red'], avoid=[], rank_cap_fired=m == 'recovr')
        turns.append(rec)
      rows.append({'method': m, 'session': s, 'reference': 10 + s % 2,
                   'target': int(TARGETS[s]), 'reference_id': IDS[10 + s % 2],
                   'target_id': IDS[TARGETS[s]], 'error': None,
                   'turns': turns})
  (d / 'trajectories.jsonl').write_text(
      ''.join(json.dumps(r, sort_keys=True) + '\n' for r in rows))
  (d / 'ranks.csv').write_text(reporting.ranks_csv(
      displayed, np.arange(3), TARGETS, IDS))
  (d / 'resolved_config.json').write_text(json.dumps(
      {'loop': {'num_turns': 2, 'list_length': 4}, 'num_sessions': 3}))
  (d / 'report.md').write_text('# ReCoVR and baselines on the test run\n')
  return d


def frames_of(index):
  rng = np.random.default_rng(index)
  return rng.random((3, 8, 8, 3))


class EventsTest(absltest.TestCase):

  def test_found_and_failure_modes_at_active_transitions(self):
    self.assertEqual(viewer.events([2, 1, 1], [5, 3, 3]), {
        'found': [1], 'not_found': [], 'drift': [], 'stagnation': [],
        'repeated_top1': []})
    self.assertEqual(viewer.events([2, 5, 5], [0, 0, 0]), {
        'found': [], 'not_found': [2], 'drift': [1], 'stagnation': [1, 2],
        'repeated_top1': [1, 2]})


class ViewerTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.dir = write_run(pathlib.Path(tempfile.mkdtemp()) / 'run')
    run = viewer.load(cls.dir)
    cls.viewer = viewer.Viewer(run, viewer.Videos(
        ids=IDS, captions=tuple(f'caption {i}' for i in range(12)),
        media=media.Media(12, frames_of, 32)))
    cls.client = testclient.TestClient(viewer.make_app(cls.viewer),
                                       base_url='http://127.0.0.1')

  def test_load(self):
    run = self.viewer.run
    self.assertEqual(run.methods, ('recovr', 'ivr'))
    self.assertEqual(run.sessions, (0, 1, 2))
    self.assertEqual(run.ranks['recovr', 1], [5, 5, 1])
    self.assertEqual(run.ranks['ivr', 1], [5, 5, 5])   # K + 1: not shown
    self.assertEqual(run.header, 'ReCoVR and baselines on the test run')

  def _sessions(self, **params):
    page = self.client.get('/', params=params)
    self.assertEqual(page.status_code, 200, page.text)
    return [int(s) for s in __import__('re').findall(
        r'class="open" href="/s/(\d+)', page.text)], page.text

  def test_index_filters_by_method_outcome_and_turn(self):
    self.assertEqual(self._sessions()[0], [0, 1, 2])
    self.assertEqual(self._sessions(outcome='found')[0], [0, 1])
    self.assertEqual(self._sessions(outcome='found', turn='2')[0], [1])
    self.assertEqual(self._sessions(a='ivr', outcome='found')[0], [0, 2])
    self.assertEqual(self._sessions(outcome='drift')[0], [2])
    self.assertEqual(self._sessions(a='ivr', outcome='stagnation')[0],
                     [0, 1])
    # A turn alone: the sessions still running at that turn.
    self.assertEqual(self._sessions(turn='2')[0], [1, 2])
    sessions, text = self._sessions(a='recovr', b='ivr')
    self.assertIn('recovr: target rank per turn', text)
    self.assertIn('ivr: target rank per turn', text)
    self.assertIn('&gt;4', text)   # censored: not in the 4 shown
    self.assertIn('3 of 3 sessions', text)

  def test_paired_outcomes_with_counts(self):
    # At the last turn recovr shows session 1's target first and ivr does
    # not; ivr session 2's and recovr not; both session 0's.
    sessions, text = self._sessions(a='recovr', b='ivr', paired='a_not_b')
    self.assertEqual(sessions, [1])
    self.assertIn('At turn 2: ', text)
    self.assertIn('recovr shows the target first and ivr does not in 1', text)
    self.assertIn('ivr does and recovr does not in 1', text)
    self.assertEqual(self._sessions(a='recovr', b='ivr',
                                    paired='b_not_a')[0], [2])
    # At turn 1: recovr has found session 0, ivr session 2.
    self.assertEqual(self._sessions(a='recovr', b='ivr', turn='1',
                                    paired='a_not_b')[0], [0])
    self.assertEqual(self._sessions(a='ivr', b='recovr', turn='1',
                                    paired='a_not_b')[0], [2])
    # With an outcome of the first method as well.
    self.assertEqual(self._sessions(a='ivr', b='recovr', paired='a_not_b',
                                    outcome='stagnation')[0], [])
    for params, message in (({'paired': 'a_not_b'}, 'choose the method'),
                            ({'b': 'ivr', 'paired': 'both'}, 'expected one')):
      page = self.client.get('/', params=params)
      self.assertEqual(page.status_code, 400)
      self.assertIn(message, page.text)

  def test_sorted_summarised_and_exported(self):
    # recovr's target ranks (K = 4; 5: not shown) per session: 2,1,1;
    # 5,5,1; 2,5,5. ivr's: 2,4,1; 5,5,5; 2,1,1.
    self.assertEqual(self._sessions(sort='gain')[0], [1, 0, 2])
    self.assertEqual(self._sessions(a='recovr', b='ivr', sort='gap')[0],
                     [1, 0, 2])
    self.assertEqual(self._sessions(a='ivr', b='recovr', sort='gap')[0],
                     [2, 0, 1])
    _, text = self._sessions(a='recovr', b='ivr')
    self.assertIn('<tr><th scope="row">recovr</th><td class="rank">0.0%</td>'
                  '<td class="rank">33.3%</td><td class="rank">66.7%</td>',
                  text)
    self.assertIn('/export.csv?a=recovr&amp;b=ivr', text)
    csv = self.client.get('/export.csv', params={'a': 'recovr', 'b': 'ivr',
                                                 'sort': 'gap'})
    self.assertEqual(csv.status_code, 200)
    self.assertEqual(csv.headers['content-type'].split(';')[0], 'text/csv')
    lines = csv.text.splitlines()
    self.assertEqual(lines[0], 'session,reference_id,target_id,'
                     'recovr_rank_t0,recovr_rank_t1,recovr_rank_t2,'
                     'ivr_rank_t0,ivr_rank_t1,ivr_rank_t2')
    self.assertEqual(lines[1], f'1,{IDS[11]},{IDS[7]},5,5,1,5,5,5')
    self.assertLen(lines, 4)
    for params, message in (({'sort': 'gap'}, 'choose the method'),
                            ({'sort': 'best'}, 'sort=')):
      self.assertEqual(self.client.get('/', params=params).status_code, 400)
      bad = self.client.get('/export.csv', params=params)
      self.assertEqual(bad.status_code, 400)
      self.assertIn(message, bad.text)

  def test_two_runs_of_the_same_sessions_side_by_side(self):
    other = write_run(pathlib.Path(tempfile.mkdtemp()) / 'rules')
    run = viewer.beside(self.viewer.run, viewer.load(other))
    self.assertEqual(run.methods, ('recovr', 'ivr', 'recovr@rules',
                                   'ivr@rules'))
    self.assertEqual(run.ranks['recovr@rules', 1], [5, 5, 1])
    self.assertIn('beside it (rules)', run.header)
    client = testclient.TestClient(viewer.make_app(viewer.Viewer(
        run, self.viewer.videos)), base_url='http://127.0.0.1')
    page = client.get('/s/1', params={'a': 'recovr', 'b': 'recovr@rules'})
    self.assertEqual(page.status_code, 200)
    self.assertIn('<h2>recovr@rules</h2>', page.text)
    self.assertIn('scores: fused score: time-weighted RRF', page.text)
    index = client.get('/', params={'a': 'recovr', 'b': 'recovr@rules',
                                    'paired': 'a_not_b'})
    self.assertIn('in 0</a>', index.text)  # the same run: never apart
    # Another run's sessions, or other targets: refused, naming what.
    fewer = dataclasses.replace(viewer.load(other), sessions=(0, 1))
    with self.assertRaisesRegex(ValueError, 'not a run of the same '
                                'sessions.*sessions \\(2 against 3'):
      viewer.beside(self.viewer.run, fewer)
    moved = viewer.load(other)
    moved.rows['recovr', 2] = dict(moved.rows['recovr', 2], target=1)
    with self.assertRaisesRegex(ValueError, "session 2's reference and "
                                'target'):
      viewer.beside(self.viewer.run, moved)

  def test_a_session_side_by_side(self):
    page = self.client.get('/s/1', params={'a': 'recovr', 'b': 'ivr'})
    self.assertEqual(page.status_code, 200)
    text = page.text
    for words in ('recovr feedback 1.1', 'ivr feedback 1.2',
                  'recovr question 1.1', 'recovr search 1.1',
                  'rank-cap fired', 'edit of session 1', IDS[7],
                  'caption 7'):
      self.assertIn(words, text)
    self.assertEqual(text.count('class="side"'), 2)
    self.assertIn('thumb target', text)   # the target among the shown
    # The question the user answered at a turn (its record's "question"),
    # and the one shown with the new list ("asked"), each under its own
    # label (they were swapped before 2026-12-07).
    self.assertIn('<dt>question answered</dt><dd class="answered">recovr '
                  'question 1.1</dd>', text)
    self.assertIn('<dt>question with this list</dt><dd class="question">'
                  'recovr asked 1.1</dd>', text)
    one_turn = self.client.get('/s/1', params={'a': 'ivr', 'turn': '1'}).text
    self.assertEqual(one_turn.count('class="turn"'), 1)
    self.assertIn('ivr feedback 1.1', one_turn)
    self.assertNotIn('ivr feedback 1.2', one_turn)

  def test_a_session_as_one_file_that_opens_without_the_server(self):
    served = self.client.get('/s/1', params={'a': 'recovr', 'b': 'ivr'}).text
    static = self.viewer.static_page('1', 'recovr', 'ivr')
    self.assertIn('src="/v/', served)
    # Every animation inside the page, no address of the server left.
    self.assertNotRegex(static, r'(src|href|action)="/')
    self.assertEqual(static.count('data:image/gif;base64,'),
                     served.count('src="/v/'))
    for words in ('recovr feedback 1.1', 'ivr feedback 1.2', IDS[7]):
      self.assertIn(words, static)
    # The served page is as before afterwards.
    self.assertEqual(self.client.get(
        '/s/1', params={'a': 'recovr', 'b': 'ivr'}).text, served)
    with self.assertRaises(viewer.BadRequest):
      self.viewer.static_page('99', 'recovr')
    out = pathlib.Path(self.create_tempdir().full_path) / 's1.html'
    proc = forked.run('experiments.view', f'--run_dir={self.dir}',
                      '--nomedia', '--export_session=1',
                      '--export_methods=recovr,ivr', f'--export_to={out}')
    self.assertEqual(proc.returncode, 0, proc.stderr[-800:])
    self.assertIn('ivr feedback 1.2', out.read_text())
    proc = forked.run('experiments.view', f'--run_dir={self.dir}',
                      '--nomedia', '--export_session=99')
    self.assertEqual(proc.returncode, 1)
    self.assertIn('--export_session / --export_methods: session', proc.stderr)

  def test_true_named_and_read_values_beside_each_turn(self):
    truth = viewer.Truth(
        attributes=lambda i: {'shape': 'circle',
                              'colour': 'red' if i == 7 else 'blue'},
        named=lambda row, t: None if row['method'] == 'ivr' else {
            'colour': 'red'},
        read=lambda text: {'colour': 'red' if 'recovr' in text else 'blue',
                           'shape': 'square'})
    client = testclient.TestClient(viewer.make_app(viewer.Viewer(
        self.viewer.run, self.viewer.videos, truth)),
                                   base_url='http://127.0.0.1')
    text = client.get('/s/1', params={'a': 'recovr', 'b': 'ivr'}).text
    self.assertIn('<dt>true values</dt><dd id="target-truth">shape circle, '
                  'colour red</dd>', text)
    self.assertIn('<dt>model caption</dt><dd id="target-caption">caption 7'
                  '</dd>', text)
    # recovr's turns 1 and 2 (then it found the target), ivr's 1 and 2.
    self.assertEqual(text.count('<dt>user named</dt>'), 4)
    self.assertEqual(text.count('<dd class="named"><span class="right">'
                                'colour red</span></dd>'), 2)
    self.assertEqual(text.count('(the replayed user said other words)'), 2)
    self.assertIn('<dd class="read"><span class="right">colour red</span>, '
                  '<span class="wrong">shape square ✗</span></dd>', text)
    self.assertIn('<span class="wrong">colour blue ✗</span>', text)  # ivr
    # Every shown video's score (the method's) and model caption.
    # Labelled with what the method's scores are: ReCoVR's fused RRF sums
    # and IVR's cosines are not one scale.
    self.assertIn('<span class="score" title="fused score: time-weighted '
                  'RRF', text)
    self.assertIn('<span class="score" title="cosine similarity', text)
    self.assertIn('0.9000</span>', text)
    self.assertIn('<p class="score-kind">scores: fused score: time-weighted '
                  'RRF', text)
    self.assertEqual(viewer.score_kind('sim_sum'), viewer.SCORE_KINDS[
        'sim_sum'])
    self.assertEqual(viewer.score_kind('not_a_method'), "the method's score")
    self.assertIn('<span class="caption" title="the captioning model\'s '
                  'caption">caption 2</span>', text)
    # Without a Truth, no attribute rows.
    plain = self.client.get('/s/1', params={'a': 'recovr'}).text
    self.assertNotIn('user named', plain)
    self.assertNotIn('true values', plain)

  def test_animations_and_refusals(self):
    gif = self.client.get('/v/3.gif')
    self.assertEqual(gif.status_code, 200)
    self.assertEqual(gif.content[:6], b'GIF89a')
    self.assertEqual(self.client.get('/v/12.gif').status_code, 404)
    for path, params, message in (
        ('/', {'a': 'nope'}, "a='nope' is not a method of this run"),
        ('/', {'b': 'x'}, "b='x' is not a method"),
        ('/', {'outcome': 'lost'}, "outcome='lost': expected one of"),
        ('/', {'turn': '3'}, "turn='3': expected 0..2"),
        ('/', {'page': '0'}, "page='0'"),
        ('/s/3', {}, "session '3' is not a session of this run"),
        ('/s/x', {}, "session 'x'"),
        # Digits Python's int() refuses, and one that would take it long.
        ('/', {'turn': '\u00b2'}, 'turn='),
        ('/', {'page': '1' * 5000}, 'page='),
        ('/s/\u00b9', {}, 'is not a session of this run')):
      page = self.client.get(path, params=params)
      self.assertEqual(page.status_code, 400, (path, params))
      self.assertIn(message.replace("'", '&#39;'), page.text)
    self.assertEqual(self.client.post('/').status_code, 405)

  def test_only_this_machines_names_are_answered(self):
    # A page elsewhere reaching the viewer through DNS rebinding sends its
    # own name as Host: refused; --allow_remote answers any.
    elsewhere = testclient.TestClient(viewer.make_app(self.viewer),
                                      base_url='http://attacker.example')
    for path in ('/', '/s/0'):
      self.assertEqual(elsewhere.get(path).status_code, 400, path)
    self.assertEqual(self.client.get('/').status_code, 200)
    anyone = testclient.TestClient(viewer.make_app(self.viewer, ('*',)),
                                   base_url='http://attacker.example')
    self.assertEqual(anyone.get('/').status_code, 200)

  def test_an_index_beyond_the_gallery_is_shown_as_such(self):
    small = viewer.Viewer(self.viewer.run, viewer.Videos(
        ids=IDS[:5], captions=tuple(f'caption {i}' for i in range(5))))
    client = testclient.TestClient(viewer.make_app(small),
                                   base_url='http://127.0.0.1')
    page = client.get('/s/1', params={'a': 'recovr'})
    self.assertEqual(page.status_code, 200)
    self.assertIn('(not in the gallery)', page.text)

  def test_without_frames_the_ids_and_captions_show(self):
    # Real files without --frames_dir: no animations, ids and captions.
    plain = viewer.Viewer(self.viewer.run, viewer.Videos(
        ids=IDS, captions=tuple(f'caption {i}' for i in range(12))))
    client = testclient.TestClient(viewer.make_app(plain),
                                   base_url='http://localhost:8000')
    page = client.get('/s/0', params={'a': 'recovr'}).text
    self.assertNotIn('.gif', page)
    self.assertIn('<span class="caption" title="the captioning model\'s '
                  'caption">caption 1</span>', page)
    self.assertIn(f'<code>{IDS[3]}</code>', page)
    self.assertEqual(client.get('/v/3.gif').status_code, 404)

  def test_frame_folders_nested_ids_captions_and_pads(self):
    # WebVid's ids name nested folders (000/100): their frames are served.
    # A video without frames links no animation (its caption stands
    # alone); an id that climbs out of the root reads nothing; the pads of
    # a list shorter than K (-1) are not shown as videos.
    from PIL import Image  # pylint: disable=g-import-not-at-top
    root = pathlib.Path(tempfile.mkdtemp())
    ids = ('000/100', 'flat', 'missing', '../outside') + IDS[4:]
    for name in ids[:2]:
      (root / name).mkdir(parents=True)
      for i in range(3):
        Image.new('RGB', (8, 6), (40 * i, 0, 0)).save(
            root / name / f'{i:03d}.png')
    (root.parent / 'outside').mkdir(exist_ok=True)
    Image.new('RGB', (8, 6)).save(root.parent / 'outside' / '000.png')
    folders = media.folder_media(root, ids, 32)
    self.assertEqual([folders.has(i) for i in range(4)],
                     [True, True, False, False])
    self.assertIsNotNone(folders.animation(0))
    self.assertIsNone(folders.animation(3))
    view = viewer.Viewer(self.viewer.run, viewer.Videos(
        ids=ids, captions=tuple(f'caption {i}' for i in range(12)),
        media=folders))
    self.assertEqual(view.video(0)['src'], '/v/0.gif')
    self.assertIsNone(view.video(2)['src'])
    self.assertEqual(view.video(2)['caption'], 'caption 2')
    run = self.viewer.run
    row = run.rows['recovr', 0]
    padded = dict(row, turns=[dict(t, top10=t['top10'][:2] + [-1, -1],
                                   top10_scores=(t['top10_scores'][:2] +
                                                 [float('-inf')] * 2))
                              for t in row['turns']])
    short = viewer.Viewer(dataclasses.replace(run, rows={
        **run.rows, ('recovr', 0): padded}), self.viewer.videos)
    client = testclient.TestClient(viewer.make_app(short),
                                   base_url='http://127.0.0.1')
    page = client.get('/s/0', params={'a': 'recovr'}).text
    self.assertNotIn('(not in the gallery)', page)
    self.assertNotIn('-inf', page)

  def test_a_turn_the_pages_cannot_read_is_named_at_load(self):
    # A score that is a string (or a top-10 that is not indices) is named
    # with its row when the run loads, never a 500 on a page.
    for field, value, message in (
        ('top10_scores', ['0.9', 0.8, 0.7, 0.6],
         'turn 0: "top10_scores" is not a list of numbers'),
        ('top10', [1, 'two', 3, 4],
         'turn 0: "top10" is not a list of gallery indices')):
      with self.subTest(field=field):
        d = write_run(pathlib.Path(tempfile.mkdtemp()) / 'run')
        lines = (d / 'trajectories.jsonl').read_text().splitlines()
        row = json.loads(lines[1])
        row['turns'][0][field] = value
        lines[1] = json.dumps(row)
        (d / 'trajectories.jsonl').write_text('\n'.join(lines) + '\n')
        with self.assertRaisesRegex(ValueError, 'trajectories.jsonl, row 2: '
                                    + message):
          viewer.load(d)

  def test_a_trajectory_without_its_method_is_named(self):
    broken = write_run(pathlib.Path(tempfile.mkdtemp()) / 'broken')
    lines = (broken / 'trajectories.jsonl').read_text().splitlines()
    row = json.loads(lines[1])
    del row['method']
    lines[1] = json.dumps(row)
    (broken / 'trajectories.jsonl').write_text('\n'.join(lines) + '\n')
    with self.assertRaisesRegex(readers.FileError,
                                r'trajectories.jsonl.*row 2.*"method"'):
      viewer.load(broken)

  def test_a_damaged_or_unfinished_run_is_named(self):
    broken = write_run(pathlib.Path(tempfile.mkdtemp()) / 'broken')
    text = (broken / 'ranks.csv').read_text()
    (broken / 'ranks.csv').write_text(text.replace('recovr,2,', 'recovr,7,',
                                                   1))
    with self.assertRaisesRegex(Exception, r'ranks.csv.*session 7'):
      viewer.load(broken)
    (broken / 'INCOMPLETE').write_text('')
    with self.assertRaisesRegex(FileNotFoundError, 'has not finished'):
      viewer.load(broken)

  def test_command_refuses_before_loading(self):
    for args, message in (
        ([f'--run_dir={self.dir}', '--host=0.0.0.0'], '--allow_remote'),
        ([f'--run_dir={self.dir}'], 'flags.txt does not exist')):
      proc = forked.run('experiments.view', *args)
      self.assertEqual(proc.returncode, 1, (args, proc.stderr[-800:]))
      self.assertIn(message, proc.stderr, args)



class WorldTruthTest(absltest.TestCase):
  """``world_truth.of_run`` on a real (tiny) run: the replayed user says
  the recorded words at every feedback turn."""

  def test_the_replay_gives_the_recorded_words_and_what_they_named(self):
    from absl.testing import flagsaver  # pylint: disable=g-import-not-at-top
    from experiments.common import run_flags  # pylint: disable=g-import-not-at-top
    from recovr_jax.run import runner  # pylint: disable=g-import-not-at-top
    from recovr_jax.study import world_truth  # pylint: disable=g-import-not-at-top
    from tests.helpers import runs  # pylint: disable=g-import-not-at-top
    out = pathlib.Path(tempfile.mkdtemp()) / 'run'
    values = dict(runs.TINY, methods=['recovr', 'ivr'], num_sessions=5,
                  output_dir=str(out), cache_dir=str(out.parent / 'cache'))
    runs.run_tiny(out, **{k: v for k, v in values.items()
                          if k not in ('output_dir', 'cache_dir')})
    with flagsaver.flagsaver(**values):
      config = run_flags.config_from_flags()
    truth = world_truth.of_run(config, runner.build(
        config, run_config.source(config)))
    run = viewer.load(out)
    turns = 0
    for row in run.rows.values():
      target = truth.attributes(row['target'])
      self.assertLen(target, 7)
      for t, rec in enumerate(row['turns'][1:], start=1):
        if rec['action'] == 'stopped':
          continue
        named = truth.named(row, t)
        self.assertIsNotNone(named, (row['method'], row['session'], t))
        # The user names the target's values, and the reply is read.
        for a, v in named.items():
          self.assertEqual(target[a], v)
        if row['method'] == 'recovr':  # ivr's reply has no search
          self.assertNotEmpty(truth.read(rec['search']))
        turns += 1
    self.assertGreater(turns, 5)
    # The data rebuilt from the run's flags is the run's; from edited
    # flags (another world seed) it is not, and the viewer says so.
    from recovr_jax.run import integrity  # pylint: disable=g-import-not-at-top
    source = run_config.source(config)
    self.assertIsNone(viewer.rebuilt_problem(
        out, integrity.resolved_config(config, source)))
    edited = dataclasses.replace(config, data=dataclasses.replace(
        config.data, world=dataclasses.replace(config.data.world,
                                               seed=config.data.world.seed
                                               + 1)))
    problem = viewer.rebuilt_problem(out, integrity.resolved_config(
        edited, run_config.source(edited)))
    self.assertIn('flags.txt: it rebuilds other data than the run read '
                  '(data.world:', problem)
    # Another turn's words are not this turn's: no named values then.
    row = run.rows['recovr', run.sessions[0]]
    if row['turns'][1]['action'] != 'stopped':
      changed = dict(row, turns=[dict(r) for r in row['turns']])
      changed['turns'][1]['feedback'] = 'something else entirely'
      self.assertIsNone(truth.named(changed, 1))


if __name__ == '__main__':
  absltest.main()
