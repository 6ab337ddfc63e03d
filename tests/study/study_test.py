"""The human-feedback study: routes, logs, restart, bad input, Table 4."""

import dataclasses
import hashlib
import json
import os
import pathlib
import re
import shutil
import tempfile

from absl import app
from absl import flags
from absl.testing import absltest
from absl.testing import flagsaver
from fastapi import testclient
import numpy as np

from experiments import study as study_main
from experiments import study_report
from recovr_jax.study import app as app_lib
from recovr_jax.study import instance
from recovr_jax.study import log
from recovr_jax.study import report
from tests.helpers import runs
from recovr_jax.study import study as study_lib

TINY = dict(benchmark='v1', num_test_triplets=12, num_train_triplets=20,
            gallery_size=300, participants=['ann', 'bob', 'cy'],
            instances=2, bootstrap_resamples=200, compilation_cache=False,
            # The participant flow has its own tests (ParticipantFlowTest).
            participant_flow=False)


class Tiny:
  """One tiny world, built once; studies over it share it (a restart is a
  new ``Study`` and app over the same logs)."""
  root = None
  built = None
  config = None
  studies = {}  # name -> the open study (a restart closes it first)

  @classmethod
  def get(cls):
    if cls.built is None:
      flags.FLAGS.mark_as_parsed()
      cls.root = pathlib.Path(tempfile.mkdtemp())
      runs.seed_cache(cls.root / 'cache')  # the tiny runs' world
      with flagsaver.flagsaver(output_dir=str(cls.root / 'study'),
                               cache_dir=str(cls.root / 'cache'), **TINY):
        cls.config = study_main.checked_config()
        from recovr_jax.run import run_config  # pylint: disable=g-import-not-at-top
        from recovr_jax.run import runner  # pylint: disable=g-import-not-at-top
        cls.built = runner.build(cls.config, run_config.source(cls.config))
    return cls

  @classmethod
  def study(cls, name: str, **overrides):
    """A study (and its app client) logging to ``root/name``."""
    cls.get()
    if name in cls.studies:  # the earlier server stops
      cls.studies.pop(name).close()
    with flagsaver.flagsaver(output_dir=str(cls.root / name),
                             cache_dir=str(cls.root / 'cache'),
                             **dict(TINY, **overrides)):
      config = study_main.checked_config()
      study, media = study_main.make_study(config, cls.built)
    cls.studies[name] = study
    return study, _Client(study, media)


class _Client(testclient.TestClient):
  """A browser for every participant of ``study``: signed in through their
  links, and adding each page's CSRF token to its forms."""

  def __init__(self, study, media=None, sign_in=True):
    super().__init__(app_lib.make_app(study, media))
    self.study = study
    for pid in study.queues if sign_in else ():
      r = self.get(f'/p/{pid}/join?code={study.code(pid)}',
                   follow_redirects=False)
      assert r.status_code == 303, r.text

  def post(self, url, *args, data=None, **kwargs):  # pylint: disable=arguments-differ
    m = re.fullmatch(r'/p/([\w-]+)/(feedback|end)', url)
    if (m and isinstance(data, dict) and 'csrf' not in data and
        m.group(1) in self.study.queues):
      data = dict(data, csrf=self.study.csrf(m.group(1)))
    return super().post(url, *args, data=data, **kwargs)


def _send(client, pid, view, text):
  return client.post(f'/p/{pid}/feedback', data={
      'instance': view['instance'], 'turn': view['turn'], 'feedback': text},
                     follow_redirects=False)


def _log(study, pid):
  return [json.loads(line) for line in
          (study.log_dir / f'{pid}.jsonl').read_text().splitlines()]


class StudyAppTest(absltest.TestCase):

  def test_signin(self):
    study, _ = Tiny.study('signin')
    client = _Client(study, sign_in=False)
    r = client.post('/signin', data={'participant': 'ann',
                                     'code': study.code('ann')},
                    follow_redirects=False)
    self.assertEqual(r.status_code, 303)
    self.assertEqual(r.headers['location'], '/p/ann')
    self.assertEqual(client.get('/p/ann').status_code, 200)
    for bad, code, why in (('zed', '', 'not a participant'),
                           ('a b', '', 'letters'), ('../ann', '', 'letters'),
                           ('', '', 'letters'),
                           ('bob', study.code('ann'), 'access code'),
                           ('bob', '', 'access code')):
      r = client.post('/signin', data={'participant': bad, 'code': code})
      self.assertEqual(r.status_code, 403, bad)
      self.assertIn(why, r.text)
    self.assertEqual(client.get('/p/bob').status_code, 403)  # not signed in
    self.assertEqual(client.get('/p/zed').status_code, 403)
    for path in ('/p/zed/feedback', '/p/zed/end', '/p/a%20b/feedback'):
      r = client.post(path, data={'instance': 0, 'turn': 0, 'feedback': ''})
      self.assertEqual(r.status_code, 403, path)

  def test_no_one_in_without_the_code_and_no_forged_forms(self):
    study, client = Tiny.study('security')
    view = study.view('ann')
    stranger = _Client(study, sign_in=False)
    self.assertEqual(stranger.get('/p/ann').status_code, 403)
    self.assertEqual(stranger.get('/v/ann/0.gif').status_code, 403)
    r = stranger.post('/p/ann/feedback', data={
        'instance': 0, 'turn': 0, 'feedback': 'forged', 'csrf': 'x'})
    self.assertEqual(r.status_code, 403)
    # Signed in, but the form comes from another site or lacks the token.
    r = client.post('/p/ann/feedback', data={
        'instance': 0, 'turn': 0, 'feedback': 'evil'},
                    headers={'Origin': 'http://evil.example'})
    self.assertEqual(r.status_code, 403)
    self.assertIn('another site', r.text)
    r = client.post('/p/ann/feedback', data={
        'instance': 0, 'turn': 0, 'feedback': 'evil', 'csrf': 'guess'})
    self.assertEqual(r.status_code, 403)
    r = client.post('/p/ann/feedback', data={  # bob's token on ann's form
        'instance': 0, 'turn': 0, 'feedback': 'evil',
        'csrf': study.csrf('bob')})
    self.assertEqual(r.status_code, 403)
    self.assertEqual(study.view('ann'), view)   # nothing logged
    self.assertNotIn('evil', (study.log_dir / 'ann.jsonl').read_text())
    self.assertNotIn('forged', (study.log_dir / 'ann.jsonl').read_text())
    # A huge body is refused before it is read; control characters never
    # reach the reasoner, the log or the page.
    r = client.post('/p/ann/feedback', data={
        'instance': 0, 'turn': 0, 'feedback': 'x' * 100_000})
    self.assertEqual(r.status_code, 413)
    self.assertEqual(_send(client, 'ann', view,
                           'red\x00 ones\x1b[31m please').status_code, 303)
    row = _log(study, 'ann')[-1]
    self.assertEqual(row['raw_feedback'], 'red ones[31m please')
    self.assertNotIn('\x1b', row['feedback'])
    # The codes: 128-bit tokens in a file only its owner can read.
    access = study.log_dir / study_lib.ACCESS_FILE
    self.assertEqual(os.stat(access).st_mode & 0o777, 0o600)
    codes = json.loads(access.read_text())['codes']
    self.assertEqual(set(codes), {'ann', 'bob', 'cy'})
    self.assertGreaterEqual(min(len(c) for c in codes.values()), 22)
    self.assertLen(set(codes.values()), 3)

  def test_a_full_instance_of_three_turns_ending_with_found_it(self):
    study, client = Tiny.study('full')
    page = client.get('/p/ann').text
    view = study.view('ann')
    # Appendix D.3's parts; the target beside the current result, first.
    for part in ('Reference video', 'Current top result', 'Target video',
                 'id="modification"', '<label for="feedback">',
                 'id="feedback"', 'id="found"', 'Instance 1 of 2'):
      self.assertIn(part, page)
    self.assertLess(page.index('id="goal"'), page.index('id="feedback"'))
    self.assertLess(page.index('id="current"'), page.index('id="goal"'))
    # No video id or gallery index on the page: opaque per-participant URLs.
    media = re.findall(r'src="(/v/ann/[0-9a-f]{24}\.gif)"', page)
    self.assertLen(set(media), len({view['top1'], view['target'],
                                    view['reference']}))
    ids = study.env.video_ids
    for video in (view['reference'], view['target'], view['top1']):
      self.assertNotIn(ids[video], page)
      self.assertNotIn(f'/{video}.gif', page)
    words = ['make them red', 'no. I want circles on sand',
             'bigger and moving left']
    for t, text in enumerate(words):
      view = study.view('ann')
      self.assertEqual(view['turn'], t)
      r = _send(client, 'ann', view, text)
      self.assertEqual(r.status_code, 303, r.text)
    view = study.view('ann')
    self.assertEqual(view['turn'], 3)
    self.assertEqual([h['feedback'] for h in view['history']], words)
    page = client.get('/p/ann').text
    self.assertNotIn('id="feedback"', page)   # three turns: no more words
    self.assertIn('id="not-found"', page)
    self.assertIn('id="history"', page)
    for text in words:
      self.assertIn(text, page)
    # "Found it" asks once more, and logs nothing until it is confirmed.
    r = client.post('/p/ann/end', data={'instance': 0, 'turn': 3,
                                        'found': '1'},
                    follow_redirects=False)
    self.assertEqual(r.status_code, 200)
    self.assertIn('id="confirm-found"', r.text)
    self.assertIn('id="cancel-found"', r.text)
    self.assertLen(_log(study, 'ann'), 5)
    r = client.post('/p/ann/end', data={'instance': 0, 'turn': 3,
                                        'found': '1', 'confirm': '1'},
                    follow_redirects=False)
    self.assertEqual(r.status_code, 303)
    self.assertEqual(study.view('ann')['instance'], 1)
    participant_log = _log(study, 'ann')
    self.assertEqual([e['event'] for e in participant_log],
                     ['header'] + ['turn'] * 4 + ['end', 'turn'])
    turns = participant_log[1:5]
    self.assertEqual([e['turn'] for e in turns], [0, 1, 2, 3])
    self.assertEqual([e['raw_feedback'] for e in turns[1:]], words)
    for e in turns:  # the runner's trajectory fields, plus timing
      for key in ('method', 'session', 'reference', 'target', 'action',
                  'feedback', 'sigma', 'question', 'top10',
                  'seconds_system', 'time'):
        self.assertIn(key, e)
      self.assertLen(e['top10'], 10)
    self.assertEqual(turns[1]['action'], 'modify')
    self.assertEqual(turns[2]['action'],
                     'answer' if turns[1]['asked'] else 'rewrite')
    self.assertTrue(participant_log[5]['found'])
    self.assertEqual(participant_log[5]['turn'], 3)
    # A second click on the same form changes nothing.
    client.post('/p/ann/end', data={'instance': 0, 'turn': 3, 'found': '1',
                                    'confirm': '1'})
    self.assertLen(_log(study, 'ann'), 7)
    # Found it on turn 0 ends at once; the last instance ends the study.
    view = study.view('ann')
    client.post('/p/ann/end', data={'instance': 1, 'turn': 0, 'found': '1',
                                    'confirm': '1'})
    self.assertTrue(study.view('ann')['done'])
    self.assertIn('id="done"', client.get('/p/ann').text)
    # Not found is refused before the last turn.
    view = study.view('bob')
    r = client.post('/p/bob/end', data={'instance': 0, 'turn': 0,
                                        'found': '0'})
    self.assertEqual(r.status_code, 400)
    self.assertEqual(study.view('bob'), view)

  def test_a_log_whose_lists_differ_is_refused_at_start(self):
    study, client = Tiny.study('replay')
    _send(client, 'bob', study.view('bob'), 'red please')
    view = study.view('bob')
    path = study.log_dir / 'bob.jsonl'
    good = path.read_text()
    rows = _log(study, 'bob')
    rows[-1]['top10'] = rows[-1]['top10'][::-1]  # another list than replayed
    path.write_text(''.join(json.dumps(r) + '\n' for r in rows))
    with self.assertRaisesRegex(app.UsageError, 'bob.jsonl: replaying '
                                'instance session .* turn 1 gives another '
                                'list.*\nRestore those logs'):
      Tiny.study('replay')   # at start, not when bob returns
    path.write_text(good)
    again, _ = Tiny.study('replay')  # the lock was released
    self.assertEqual(again.view('bob'), view)

  def test_resume_after_a_restart_replays_the_log(self):
    study, client = Tiny.study('restart')
    for text in ('red please', 'now squares'):
      _send(client, 'bob', study.view('bob'), text)
    before = study.view('bob')
    del study, client  # the process ends
    again, client = Tiny.study('restart')
    self.assertEqual(again.view('bob'), before)
    self.assertEqual(_send(client, 'bob', before, 'smaller').status_code,
                     303)
    after = again.view('bob')
    self.assertEqual(after['turn'], 3)
    # The same words on a study that never stopped give the same lists.
    fresh, client = Tiny.study('no_restart')
    for text in ('red please', 'now squares', 'smaller'):
      _send(client, 'bob', fresh.view('bob'), text)
    self.assertEqual(
        [e['top10'] for e in _log(fresh, 'bob')[1:]],
        [e['top10'] for e in _log(again, 'bob')[1:]])
    self.assertEqual(fresh.view('bob'), after)

  def test_bad_input_changes_nothing(self):
    study, client = Tiny.study('bad')
    view = study.view('cy')
    lines = len(_log(study, 'cy'))
    for text, status, message in (
        ('', 400, 'it was empty'), ('   \n ', 400, 'it was empty'),
        ('x' * 1001, 400, 'limited to 1,000 characters')):
      r = _send(client, 'cy', view, text)
      self.assertEqual(r.status_code, status)
      self.assertIn(message, r.text)
      self.assertLen(_log(study, 'cy'), lines)
      self.assertEqual(study.view('cy'), view)
    r = client.post('/p/cy/feedback', data={'instance': 'x', 'turn': 0,
                                            'feedback': 'red'})
    self.assertEqual(r.status_code, 400)
    # A stale form (a turn already answered) changes nothing.
    self.assertEqual(_send(client, 'cy', view, 'red').status_code, 303)
    lines = len(_log(study, 'cy'))
    _send(client, 'cy', view, 'red')
    self.assertLen(_log(study, 'cy'), lines)
    self.assertEqual(_send(client, 'cy', study.view('cy'),
                           'y' * 1000).status_code, 303)  # at the limit
    # Media: only the videos a participant's pages showed, by their token.
    shown = re.findall(r'src="(/v/cy/[0-9a-f]{24}\.gif)"',
                       client.get('/p/cy').text)
    self.assertNotEmpty(shown)
    self.assertEqual(client.get(shown[0]).headers['content-type'],
                     'image/gif')
    other = _Client(study, sign_in=False)
    other.get(f'/p/ann/join?code={study.code("ann")}')
    self.assertEqual(other.get(shown[0]).status_code, 403)  # cy's token
    self.assertEqual(other.get(shown[0].replace('/cy/', '/ann/')).status_code,
                     404)  # not shown to ann under that token
    for path in ('/v/cy/0.gif', '/v/cy/-1.gif', '/v/cy/a.gif',
                 '/v/cy/..%2F..%2Fetc%2Fpasswd', '/v/../setup.py',
                 '/media/0.gif', '/v/cy/%2e%2e/%2e%2e/setup.py'):
      self.assertIn(client.get(path).status_code, (404, 422), path)

  def test_two_participants_keep_separate_state(self):
    study, client = Tiny.study('two')
    a, b = study.view('ann'), study.view('bob')
    self.assertNotEqual(a['session'], b['session'])
    _send(client, 'ann', a, 'red')
    self.assertEqual(study.view('bob'), b)
    _send(client, 'bob', b, 'blue squares')
    _send(client, 'ann', study.view('ann'), 'smaller')
    self.assertEqual(study.view('ann')['turn'], 2)
    self.assertEqual(study.view('bob')['turn'], 1)
    self.assertEqual(
        [e['raw_feedback'] for e in _log(study, 'bob')[2:]], ['blue squares'])
    queues = study.queues
    self.assertEmpty(set(queues['ann']) & set(queues['bob']))

  def test_a_reasoning_error_is_a_retry_not_a_lost_session(self):
    study, client = Tiny.study('error')
    _send(client, 'ann', study.view('ann'), 'red')
    view = study.view('ann')
    step = study.method.step
    calls = []

    def failing(*args):
      calls.append(1)
      if len(calls) == 1:
        raise RuntimeError('reasoner fell over')
      return step(*args)

    study.method.step = failing
    r = _send(client, 'ann', view, 'bigger')
    self.assertEqual(r.status_code, 500)
    self.assertIn('Please submit it again', r.text)
    self.assertIn('bigger', r.text)   # the words stay in the box
    self.assertEqual(study.view('ann'), view)
    participant_log = _log(study, 'ann')
    self.assertEqual(participant_log[-1]['event'], 'error')
    self.assertIn('reasoner fell over', participant_log[-1]['error'])
    self.assertEqual(_send(client, 'ann', view, 'bigger').status_code, 303)
    self.assertEqual(study.view('ann')['turn'], 2)
    self.assertEqual(report.load(study.log_dir).errors, 1)

  def test_a_torn_last_line_is_cut_and_a_foreign_log_refused(self):
    study, client = Tiny.study('torn')
    _send(client, 'ann', study.view('ann'), 'red')
    view = study.view('ann')
    path = study.log_dir / 'ann.jsonl'
    with path.open('a') as f:
      f.write('{"event": "turn", "tur')   # a crash mid-append
    again, _ = Tiny.study('torn')
    self.assertEqual(again.view('ann'), view)
    self.assertTrue(path.read_text().endswith('\n'))
    # A log written under other flags is refused, naming the file.
    header = json.loads(path.read_text().splitlines()[0])
    header['num_turns'] = 5
    lines = path.read_text().splitlines()
    path.write_text('\n'.join([json.dumps(header)] + lines[1:]) + '\n')
    with self.assertRaisesRegex(app.UsageError, 'ann.jsonl.*num_turns'):
      Tiny.study('torn')  # every log is checked when the server starts

  def test_a_failed_log_write_leaves_the_participant_where_it_was(self):
    study, client = Tiny.study('disk_full')
    _send(client, 'ann', study.view('ann'), 'red')
    view = study.view('ann')
    path = study.log_dir / 'ann.jsonl'
    before = path.read_bytes()
    p = study.participant('ann')
    write = p.log._write_line  # pylint: disable=protected-access

    def full(row, create=False):
      with path.open('ab') as f:
        f.write(b'{"event": "turn", "half')   # part of it reached the disk
      raise OSError(28, 'No space left on device')

    p.log._write_line = full  # pylint: disable=protected-access
    r = _send(client, 'ann', view, 'bigger')
    self.assertEqual(r.status_code, 500)
    self.assertIn('could not be saved', r.text)
    self.assertEqual(path.read_bytes(), before)  # cut back
    p.log._write_line = write  # pylint: disable=protected-access
    self.assertEqual(study.view('ann'), view)   # not advanced
    self.assertEqual(_send(client, 'ann', view, 'bigger').status_code, 303)
    self.assertEqual(study.view('ann')['turn'], 2)
    again, _ = Tiny.study('disk_full')          # and a restart replays it
    self.assertEqual(again.view('ann'), study.view('ann'))

  def test_a_second_server_on_the_same_logs_is_refused(self):
    study, _ = Tiny.study('two_servers')
    with self.assertRaisesRegex(log.LogError, 'another study server is '
                                'using .*two_servers'):
      study_lib.Study(study.env, study.method, study.ctx, study.base,
                      study.config, {'identity': 'x'})
    study.close()
    Tiny.studies.pop('two_servers')
    Tiny.study('two_servers')  # released: starts

  def test_a_damaged_line_is_recovered_up_to_the_last_good_one(self):
    study, client = Tiny.study('damaged')
    for text in ('red', 'squares', 'smaller'):
      _send(client, 'bob', study.view('bob'), text)
    path = study.log_dir / 'bob.jsonl'
    lines = path.read_text().splitlines()
    kept = lines[:3]           # header, turn 0, turn 1
    lines[3] = lines[3][:40] + '\x00' + lines[3][40:]   # turn 2 damaged
    path.write_text('\n'.join(lines) + '\n')
    again, _ = Tiny.study('damaged')   # checked at start, not on return
    self.assertEqual(again.recovered['bob']['from_line'], 4)
    aside = pathlib.Path(again.recovered['bob']['kept_aside'])
    self.assertEqual(aside.read_text().splitlines(), lines[3:])
    self.assertEqual(path.read_text().splitlines(), kept)
    self.assertEqual(again.view('bob')['turn'], 1)  # continues, not reset
    # The administration view says what the damaged log lost.
    rows = {r['participant']: r for r in again.progress()}
    self.assertTrue(rows['bob']['log'].startswith('recovered: '))
    self.assertIn("'from_line': 4", rows['bob']['log'])
    self.assertIn(str(aside), rows['bob']['log'])
    admin = _Client(again, sign_in=False)
    page = admin.get(f'/admin/join?token={again.admin_token()}')
    self.assertEqual(page.status_code, 200)
    self.assertIn('recovered: ', page.text)
    self.assertIn('damaged-', page.text)  # where the lost lines were kept

  def test_adding_a_participant_keeps_the_existing_ones(self):
    study, client = Tiny.study('grow')
    _send(client, 'ann', study.view('ann'), 'red')
    view = study.view('ann')
    more, client = Tiny.study('grow', participants=['ann', 'bob', 'cy', 'dee'])
    self.assertEqual(more.view('ann'), view)
    self.assertEqual(more.view('dee')['turn'], 0)

  def test_study_report_command(self):
    study, client = Tiny.study('report')
    for pid in ('ann', 'bob'):
      for k in range(2):
        for text in ('red', 'circles', 'smaller'):
          view = study.view(pid)
          if view['turn'] == 3:
            break
          _send(client, pid, view, text)
        client.post(f'/p/{pid}/end', data={
            'instance': k, 'turn': study.view(pid)['turn'], 'found': '0'})
    _send(client, 'cy', study.view('cy'), 'red')   # unfinished
    with flagsaver.flagsaver(output_dir=str(Tiny.root / 'report'),
                             cache_dir=str(Tiny.root / 'cache'), **TINY):
      study_report.main(['study_report'])
    out = json.loads((Tiny.root / 'report' / 'report' /
                      'table4.json').read_text())
    self.assertEqual(out['instances'], 4)
    self.assertEqual(out['unfinished'], 1)
    self.assertEqual(set(out['r_at_1']), {'recovr, human',
                                          'recovr, simulated',
                                          'ivr, simulated'})
    logged = report.load(study.log_dir)
    human = report.hits(logged.displayed, logged.targets).mean(0)
    np.testing.assert_allclose(out['r_at_1']['recovr, human']['mean'], human)
    self.assertEqual(out['lengths']['recovr, human']['utterances'], 12)
    rows = (Tiny.root / 'report' / 'report' /
            'trajectories_human.jsonl').read_text().splitlines()
    self.assertLen(rows, 4)
    self.assertLen(json.loads(rows[0])['turns'], 4)
    # Flags for another loop than the study's are refused.
    with flagsaver.flagsaver(output_dir=str(Tiny.root / 'report'),
                             cache_dir=str(Tiny.root / 'cache'), window=2,
                             **TINY):
      with self.assertRaisesRegex(Exception, 'another environment or loop'):
        study_report.main(['study_report'])


class SameLoopTest(absltest.TestCase):
  """A participant who types the simulated user's words sees the lists a
  simulated run shows (ReCoVR does not read the action label)."""

  def test_scripted_participant_equals_the_runner(self):
    study, client = Tiny.study('same_loop')
    config = Tiny.config
    from recovr_jax.run import assemble  # pylint: disable=g-import-not-at-top
    user = assemble.assemble(config, Tiny.built).user
    sessions = []
    for _ in range(2):
      view = study.view('bob')
      sessions.append(view['session'])
      while True:
        fb = user(view['session'], view['turn'] + 1, view['target'],
                  view['top1'], view['question'])
        if fb.action == 'stop' or view['turn'] == view['num_turns']:
          client.post('/p/bob/end', data={
              'instance': view['instance'], 'turn': view['turn'],
              'found': '1', 'confirm': '1'})
          break
        _send(client, 'bob', view, fb.text)
        view = study.view('bob')
    logged = report.load(study.log_dir)
    simulated = study_report.simulate(config, ['recovr'], sessions, 3,
                                      built=Tiny.built)['recovr']
    np.testing.assert_array_equal(logged.displayed,
                                  simulated.displayed[:, :, :10])


class ParticipantFlowTest(absltest.TestCase):
  """Instructions and consent, a practice instance, the debrief with its
  completion code, and the administration view."""

  def test_consent_practice_instances_debrief_and_admin(self):
    study, client = Tiny.study('flow', participant_flow=True)
    page = client.get('/p/ann').text
    for part in ('id="instructions"', 'id="consent-text"', 'id="agree"',
                 'id="decline"', 'practice'):
      self.assertIn(part, page)
    self.assertNotIn('.gif', page)  # nothing of the study before consent
    self.assertEqual(study.view('ann')['stage'], 'consent')
    # No feedback before consent.
    r = client.post('/p/ann/feedback', data={'instance': 0, 'turn': 0,
                                             'feedback': 'red'})
    self.assertEqual(r.status_code, 400)
    self.assertIn('consent first', r.text)
    # bob declines: nothing more is asked, the answer is logged.
    consent = lambda pid, agree: client.post(
        f'/p/{pid}/consent', data={'agree': agree,
                                   'csrf': study.csrf(pid)},
        follow_redirects=False)
    self.assertEqual(consent('bob', '0').status_code, 303)
    self.assertIn('id="declined"', client.get('/p/bob').text)
    self.assertFalse(_log(study, 'bob')[-1]['agreed'])
    self.assertEqual(consent('bob', '1').status_code, 303)  # no second answer
    self.assertEqual(study.view('bob')['stage'], 'declined')
    # ann agrees: the practice video, then the two counted ones.
    self.assertEqual(consent('ann', '1').status_code, 303)
    event = _log(study, 'ann')[1]
    self.assertEqual((event['event'], event['agreed']), ('consent', True))
    self.assertEqual(event['text_sha256'], hashlib.sha256(
        study_lib.CONSENT.encode()).hexdigest())
    page = client.get('/p/ann').text
    self.assertIn('Practice video (not counted)', page)
    # "Found it" and "Send feedback" are styled apart.
    self.assertIn('button#found { background: #1d6e1d', page)
    self.assertIn('button#send { background: #fff', page)
    practice_session = study.view('ann')['session']
    for k in range(3):
      view = study.view('ann')
      self.assertEqual(view['practice'], k == 0)
      if k == 0:   # the practice never starts with the target on top
        self.assertNotEqual(view['top1'], view['target'])
      if k:
        self.assertIn(f'Instance {k} of 2', client.get('/p/ann').text)
      _send(client, 'ann', view, 'make them red')
      view = study.view('ann')
      r = client.post('/p/ann/end', data={
          'instance': view['instance'], 'turn': view['turn'], 'found': '1',
          'confirm': '1'})
      self.assertEqual(r.status_code, 200, r.text)
    page = client.get('/p/ann').text
    self.assertIn('id="debrief"', page)
    self.assertIn(study_lib.DEBRIEF.split(',')[0], page)   # contact text
    code = study.completion_code('ann')
    self.assertRegex(code, r'^[0-9A-F]{10}$')
    self.assertIn(code, page)
    self.assertNotEqual(code, study.completion_code('cy'))
    # Table 4 leaves the practice instance out.
    logged = report.load(study.log_dir)
    self.assertLen(logged.rows, 2)
    self.assertNotIn(practice_session, logged.sessions.tolist())
    self.assertNotIn(practice_session, [
        s for p, q in study.queues.items() for s in q[1:]])
    # The administration view, behind its own token.
    admin = _Client(study, sign_in=False)
    self.assertEqual(admin.get('/admin').status_code, 403)
    self.assertEqual(admin.get('/admin/join?token=guess').status_code, 403)
    self.assertEqual(client.get('/admin').status_code, 403)  # a participant
    r = admin.get(f'/admin/join?token={study.admin_token()}')
    self.assertEqual(r.status_code, 200)
    table = re.sub(r' data-label="[^"]*"', '', r.text)  # (phone labels)
    # ann's turns: one feedback in each counted instance (her practice
    # feedback is not counted).
    for row in ('<td>ann</td><td>agreed</td><td>done</td><td>2 of 2</td>'
                '<td>2</td>',
                '<td>bob</td><td>declined</td>',
                '<td>cy</td><td>-</td><td>-</td><td>0 of 2</td>'):
      self.assertIn(row, table)
    self.assertIn('experiments.study_report', table)

  def test_admin_builds_table4_in_a_child_process(self):
    # The report command runs as a child process from the admin page, one
    # build at a time; only the admin's same-origin form starts it; the
    # table is then served to the admin alone. A stand-in command writes
    # the table (the real one runs the simulated users: too slow here).
    import sys  # pylint: disable=g-import-not-at-top
    import time  # pylint: disable=g-import-not-at-top
    from recovr_jax.study import report_job  # pylint: disable=g-import-not-at-top
    study, _ = Tiny.study('table4_build', participant_flow=True)
    out = study.log_dir.parent / 'report'
    script = ('import pathlib, sys, time; time.sleep(float(sys.argv[2])); '
              'p = pathlib.Path(sys.argv[1]); '
              "(p / 'table4.md').write_text('| turn | R@1 |')")
    job = report_job.ReportJob([sys.executable, '-c', script, str(out), '1'],
                               out)
    admin = testclient.TestClient(app_lib.make_app(study, None, job))
    participant = _Client(study)
    self.assertEqual(admin.post('/admin/report').status_code, 403)
    admin.get(f'/admin/join?token={study.admin_token()}')
    page = admin.get('/admin').text
    self.assertIn('has not been built', page)
    self.assertIn('Build Table 4 now', page)
    self.assertEqual(admin.get('/admin/table4').status_code, 404)
    # Another origin, and a participant, are refused.
    self.assertEqual(admin.post('/admin/report', headers={
        'origin': 'http://evil.example'}).status_code, 403)
    self.assertEqual(participant.post('/admin/report').status_code, 403)
    r = admin.post('/admin/report', follow_redirects=False)
    self.assertEqual(r.status_code, 303)
    self.assertIn('Building Table 4 since', admin.get('/admin').text)
    again = admin.post('/admin/report')
    self.assertIn('already running', again.text)
    for _ in range(100):
      if job.status().state != 'running':
        break
      time.sleep(0.1)
    status = job.status()
    self.assertEqual(status.state, 'done', status.tail)
    page = admin.get('/admin').text
    self.assertIn('Table 4 built', page)
    self.assertIn('href="/admin/table4"', page)
    self.assertEqual(admin.get('/admin/table4').text, '| turn | R@1 |')
    self.assertEqual(participant.get('/admin/table4').status_code, 403)
    # A failing command is reported with its output.
    failing = report_job.ReportJob(
        [sys.executable, '-c', 'import sys; print("no logs"); sys.exit(3)'],
        study.log_dir.parent / 'failing')
    failing.start()
    for _ in range(100):
      if failing.status().state != 'running':
        break
      time.sleep(0.1)
    self.assertEqual((failing.status().state, failing.status().code),
                     ('failed', 3))
    self.assertIn('no logs', failing.status().tail)


class RealDataStudyTest(absltest.TestCase):
  """The study on WebVid-CoVR-style files: frame folders where given, the
  caption where not."""

  def test_frames_or_captions(self):
    from tests.helpers import real_files  # pylint: disable=g-import-not-at-top
    flags.FLAGS.mark_as_parsed()
    root = pathlib.Path(tempfile.mkdtemp())
    files = real_files.write_real_data(root, frames_dir=root / 'frames')
    with flagsaver.flagsaver(
        output_dir=str(root / 'study'), frames_dir=str(root / 'frames'),
        list_length=5, participants=['r1'], instances=2,
        compilation_cache=False, participant_flow=False, **files):
      config = study_main.checked_config()
      study, media = study_main.make_study(config)
    client = _Client(study, media)
    view = study.view('r1')
    page = client.get('/p/r1').text
    shown = re.findall(r'src="(/v/r1/[0-9a-f]{24}\.gif)"', page)
    for video in (view['reference'], view['target']):
      self.assertNotIn(f'v{video}<', page)  # the real id is not shown
      if video % 2 == 0:  # frames: an animation under a token
        self.assertNotEmpty(shown)
      else:  # no frames: the caption stands in
        self.assertIn(f'video number {video}', page)
    for src in shown:
      self.assertEqual(client.get(src).status_code, 200)
    self.assertEqual(_send(client, 'r1', view, 'more different').status_code,
                     303)
    self.assertLen(_log(study, 'r1')[-1]['top10'], 5)
    with flagsaver.flagsaver(frames_dir=str(root / 'frames')):
      with self.assertRaisesRegex(Exception, '--frames_dir is for .*, not '
                                  '--data=world'):
        study_main.checked_config()
    with flagsaver.flagsaver(start='text'):
      with self.assertRaisesRegex(Exception, '--start=text: a study shows'):
        study_main.checked_config()


def _write_log(path, participant, events):
  header = {'event': 'header', 'participant': participant, 'method': 'm',
            'num_turns': 2, 'identity': 'x'}
  path.write_text('\n'.join(json.dumps(e) for e in [header] + events) + '\n')


def _turn(query_instance, turn, top, feedback='', target=7, seconds=0.5):
  return {'event': 'turn', 'instance': query_instance, 'turn': turn,
          'session': 10 + query_instance, 'target': target, 'reference': 1,
          'method': 'm', 'top10': top, 'raw_feedback': feedback or None,
          'feedback': feedback, 'seconds_system': seconds}


class ReportTest(absltest.TestCase):
  """Table 4 on a synthetic log, against a hand count."""

  def test_hand_count(self):
    root = pathlib.Path(tempfile.mkdtemp())
    miss, hit = [1, 2, 3], [7, 1, 2]
    # p: instance 0 found at turn 1 (hit after), instance 1 "found" a wrong
    # video at turn 0 (miss throughout), instance 2 unfinished.
    _write_log(root / 'p.jsonl', 'p', [
        _turn(0, 0, miss), _turn(0, 1, hit, 'red ones please', seconds=1.0),
        {'event': 'end', 'instance': 0, 'turn': 1, 'found': True},
        _turn(1, 0, miss), {'event': 'end', 'instance': 1, 'turn': 0,
                            'found': True},
        _turn(2, 0, hit)])
    # q: instance 0: miss, miss, hit at turn 2 (out of turns); one error.
    _write_log(root / 'q.jsonl', 'q', [
        _turn(0, 0, miss), _turn(0, 1, miss, 'bigger', seconds=3.0),
        {'event': 'error', 'instance': 0, 'turn': 2},
        _turn(0, 2, hit, 'no, circles on sand', seconds=2.0),
        {'event': 'end', 'instance': 0, 'turn': 2, 'found': False}])
    logged = report.load(root)
    self.assertLen(logged.rows, 3)
    self.assertEqual((logged.unfinished, logged.errors), (1, 1))
    # Turn 0: 0/3; turn 1: p0 only, 1/3; turn 2: p0 and q0, 2/3.
    np.testing.assert_allclose(
        report.hits(logged.displayed, logged.targets).mean(0),
        [0, 1 / 3, 2 / 3])
    out = report.table({'human': logged.displayed}, logged.targets, 100, 0)
    np.testing.assert_allclose(out['r_at_1']['human']['mean'],
                               [0, 1 / 3, 2 / 3], rtol=1e-6)
    stats = report.lengths(report.human_feedback(logged))
    self.assertEqual(stats['utterances'], 3)
    self.assertAlmostEqual(stats['mean_words'], (3 + 1 + 4) / 3)
    self.assertEqual(stats['max_words'], 4)
    self.assertEqual(report.waits(logged)['median_s'], 2.0)
    self.assertEqual(report.waits(logged)['max_s'], 3.0)
    text = report.markdown(out, 3, {
        'lengths': {'human': stats}, 'waits': report.waits(logged),
        'unfinished': 1, 'errors': 1})
    self.assertIn('| human | 0.0 [0.0, 0.0] | 33.3', text)

  def test_bad_logs(self):
    root = pathlib.Path(tempfile.mkdtemp())
    with self.assertRaisesRegex(FileNotFoundError, 'no study logs'):
      report.load(root)
    _write_log(root / 'p.jsonl', 'p', [_turn(0, 1, [1])])
    with self.assertRaisesRegex(log.LogError, r'p.jsonl, line 2.*'
                                'expected turn 0'):
      report.load(root)
    (root / 'p.jsonl').write_text('{"event": "header"}\nnot json\n')
    with self.assertRaisesRegex(log.LogError, 'p.jsonl, line 2'):
      report.load(root)
    # Beside an intact log, a damaged one is left out and listed.
    _write_log(root / 'q.jsonl', 'q', [
        _turn(0, 0, [1]),
        {'event': 'end', 'instance': 0, 'turn': 0, 'found': True}])
    logged = report.load(root)
    self.assertLen(logged.rows, 1)
    self.assertLen(logged.damaged, 1)
    self.assertIn('p.jsonl, line 2', logged.damaged[0])
    shutil.rmtree(root)


class FeedbackTextTest(absltest.TestCase):

  def test_clean_feedback_and_action(self):
    self.assertEqual(instance.clean_feedback('  red\n\tplease '),
                     'red please')
    for bad in ('', ' \n', 'x' * 1001):
      with self.assertRaises(instance.FeedbackError):
        instance.clean_feedback(bad)
    self.assertEqual(instance.human_action('red', 'What colour?'),
                     'answer')
    self.assertEqual(instance.human_action('wrong one, circles', None),
                     'rewrite')
    self.assertEqual(instance.human_action('make it red', None), 'modify')

  def test_participant_ids_and_assignments(self):
    with self.assertRaisesRegex(ValueError, 'twice'):
      study_lib.check_participant_ids(['a', 'a'])
    with self.assertRaisesRegex(ValueError, "'a/b' is not an id"):
      study_lib.check_participant_ids(['a/b'])
    config = study_lib.StudyConfig(('a', 'b'), 3, '/tmp/x', seed=1,
                                   flow=False)
    q = study_lib.assignments(config, 10)
    self.assertEqual(q, study_lib.assignments(config, 10))
    self.assertLen(set(q['a']) | set(q['b']), 6)
    with self.assertRaisesRegex(ValueError, '2 participants x --instances=3'
                                ' = 6 instances, but the test split has 5'):
      study_lib.assignments(config, 5)
    # With the participant flow each gets a practice query first, disjoint
    # from every instance; the instances are the same as without it.
    flow = study_lib.assignments(dataclasses.replace(config, flow=True), 10)
    self.assertEqual({p: v[1:] for p, v in flow.items()}, q)
    self.assertLen(set(flow['a']) | set(flow['b']), 8)
    with self.assertRaisesRegex(ValueError, r'\(--instances=3 \+ 1 '
                                r'practice\) = 8 instances'):
      study_lib.assignments(dataclasses.replace(config, flow=True), 7)
    # A practice query whose first list already shows its target on top is
    # replaced by the next unassigned one (the instances stay as they are).
    on_top = {flow['a'][0], flow['b'][0]}
    safer = study_lib.assignments(dataclasses.replace(config, flow=True), 10,
                                  starts_on_target=on_top.__contains__)
    self.assertEqual({p: v[1:] for p, v in safer.items()}, q)
    practice = {safer['a'][0], safer['b'][0]}
    self.assertEmpty(practice & on_top)
    self.assertLen(set(safer['a']) | set(safer['b']), 8)
    # Spares used up: another participant's instance, never one's own.
    q8 = study_lib.assignments(config, 8)
    few = study_lib.assignments(
        dataclasses.replace(config, flow=True), 8,
        starts_on_target=lambda s: s not in (q8['a'][0], q8['b'][0]))
    self.assertEqual((few['a'][0], few['b'][0]), (q8['b'][0], q8['a'][0]))
    with self.assertRaisesRegex(ValueError, 'starts with its target on top'):
      study_lib.assignments(dataclasses.replace(config, flow=True), 10,
                            starts_on_target=lambda s: True)


if __name__ == '__main__':
  absltest.main()
