"""The human-feedback study (paper section 4.4, appendix D.3), without the web.

Participants are known ids; each gets ``instances`` composed queries of the
test split, drawn reproducibly (participant ``j`` of the list gets slice
``j`` of one permutation seeded by ``seed``, so no two share an instance),
and answers each for at most ``T`` feedback turns or until "Found it".

Every event goes to the participant's log (``study.log``) before the
participant sees its result; a participant who comes back, or a study
restarted after a crash, continues from the log: the unfinished instance is
replayed turn by turn (the loop is deterministic) and each replayed list is
checked against the logged one.
"""

import dataclasses
import datetime
import hashlib
import hmac
import itertools
import json
import os
import secrets
import pathlib
import re
import threading
import time

from absl import logging
import numpy as np

from recovr_jax import readers
from recovr_jax.study import instance
from recovr_jax.study import log

PARTICIPANT_ID = re.compile(r'[A-Za-z0-9_-]{1,64}')
FeedbackError = instance.FeedbackError


class UnknownParticipant(KeyError):
  """An id that is malformed or not on the study's list."""


class Retry(RuntimeError):
  """A turn whose reasoning raised: logged, nothing lost; submit again."""


@dataclasses.dataclass(frozen=True)
class StudyConfig:
  participants: tuple[str, ...]
  instances: int              # per participant
  log_dir: str
  seed: int = 0
  # The participant flow: instructions and consent (logged) first, one
  # practice instance (its own query, left out of Table 4), a debrief with
  # a completion code at the end. Off: straight to the instances (an
  # experimenter instructs in person).
  flow: bool = True
  # The debrief's contact and withdrawal text (--debrief).
  debrief: str = ''


# What a participant agrees to (its SHA-256 is logged with the consent).
CONSENT = (
    'I agree to take part in this study of a video search system. I will '
    'describe, in my own words, how the results should change until I find '
    'a target video or run out of turns. My words, my choices and their '
    'timing are recorded under my participant id, with no other personal '
    'data, and used for research only. I can stop at any time by closing '
    'the page.')


# The debrief's default contact and withdrawal text.
DEBRIEF = (
    'Questions about the study, or want your answers withdrawn? Write to the '
    'researcher who sent you the link, quoting your participant id; your '
    'logged answers are then deleted and left out of every result.')


def check_participant_ids(ids) -> tuple[str, ...]:
  ids = tuple(ids)
  if not ids:
    raise ValueError('--participants: give at least one id')
  bad = [p for p in ids if not PARTICIPANT_ID.fullmatch(p)]
  if bad:
    raise ValueError(f'--participants: {bad[0]!r} is not an id (letters, '
                     'digits, _ and -, at most 64)')
  if len(set(ids)) != len(ids):
    raise ValueError('--participants lists an id twice')
  return ids


def assignments(config: StudyConfig, num_queries: int,
                starts_on_target=None) -> dict:
  """``{participant: [session indices]}``, disjoint: participant ``j``'s
  practice instance first (when ``config.flow``), then its
  ``instances``. ``starts_on_target(session)``: whether a query's first
  list already shows its target on top; such a query is never a practice
  one (the next unassigned query of the permutation is taken instead, or
  on a small split another participant's instance)."""
  if config.instances < 1:
    raise ValueError(f'--instances must be >= 1, got {config.instances}')
  n, k = config.instances, len(config.participants)
  need = k * (n + int(config.flow))
  if need > num_queries:
    each = f'(--instances={n} + 1 practice)' if config.flow else (
        f'--instances={n}')
    raise ValueError(
        f'{k} participants x {each} = {need} instances, but the test split '
        f'has {num_queries} composed queries')
  order = np.random.default_rng(config.seed).permutation(num_queries)
  spare = iter(order[k * (n + 1):].tolist())
  queues = {}
  for j, p in enumerate(config.participants):
    own = order[j * n:(j + 1) * n].tolist()
    practice = []
    if config.flow:
      # The practice query: the participant's own spare one; if its first
      # list shows the target on top, the next unassigned query, then
      # (a small split) another participant's instance, never their own.
      others = (int(q) for i, q in enumerate(order[:k * n])
                if i // n != j)
      candidates = itertools.chain([int(order[k * n + j])], spare, others)
      practice = [next((q for q in candidates if starts_on_target is None
                        or not starts_on_target(q)), None)]
      if practice[0] is None:
        raise ValueError('every composed query starts with its target on '
                         'top: there is no practice query to give')
    queues[p] = practice + own
  return queues


def _lock_dir(log_dir: pathlib.Path):
  """An exclusive lock on ``log_dir`` for this process (a second study
  server on the same directory is refused); returns the open lock file."""
  import fcntl  # pylint: disable=g-import-not-at-top
  log_dir.mkdir(parents=True, exist_ok=True)
  lock = open(log_dir / '.study.lock', 'w')  # pylint: disable=consider-using-with
  try:
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except OSError as e:
    lock.close()
    raise log.LogError(
        f'another study server is using {log_dir} (it holds '
        f'{log_dir / ".study.lock"}); stop it, or give this one another '
        '--output_dir') from e
  return lock


ACCESS_FILE = 'access.json'


CODE_LENGTH = len(secrets.token_urlsafe(16))  # 22 characters, 128 bits


def _check_access(path: pathlib.Path, data, participants):
  """Refuses an access file that would let someone in or answer 500: every
  code a string of the generated length, every participant one of the
  study's, the admin token and the form key strings of their length."""
  def refuse(what):
    raise log.LogError(
        f'{path}: {what}; the study does not start with it. Move the file '
        'aside to give every participant a new link, or restore it from '
        'the copy the links were sent from')

  if not isinstance(data, dict):
    refuse('not a JSON object with codes, csrf_key and admin')
  codes = data.get('codes')
  if not isinstance(codes, dict):
    refuse('no "codes" object (participant id -> access code)')
  known = set(participants)
  for pid, code in codes.items():
    if pid not in known:
      refuse(f'a code for participant {pid!r}, who is not in this study\'s '
             f'participants ({", ".join(sorted(known))})')
    if not isinstance(code, str) or len(code) != CODE_LENGTH:
      refuse(f'the code of participant {pid!r} is not a string of '
             f'{CODE_LENGTH} characters (an empty or short code would let '
             'anyone in as them)')
  if not isinstance(data.get('csrf_key'), str) or len(data['csrf_key']) != 64:
    refuse('"csrf_key" is not a string of 64 hex digits')
  admin = data.get('admin')
  if admin is not None and (not isinstance(admin, str)
                            or len(admin) != CODE_LENGTH):
    refuse(f'"admin" is not a string of {CODE_LENGTH} characters')


def _access(log_dir: pathlib.Path, participants) -> dict:
  """``{'codes': {participant: code}, 'csrf_key': key, 'admin': token}`` from
  ``<log_dir>/access.json`` (readable by its owner only), created or
  extended for new participants; codes are unguessable (128 bits). An
  existing file is checked whole first (``_check_access``)."""
  path = log_dir / ACCESS_FILE
  data = {'codes': {}, 'csrf_key': None}
  if path.exists():
    try:
      data = readers.read_json(path, 'access file')
    except ValueError as e:
      raise log.LogError(f'{e}; move it aside (the participants get new '
                             'links)') from e
    _check_access(path, data, participants)
  changed = data['csrf_key'] is None or not data.get('admin')
  data['csrf_key'] = data['csrf_key'] or secrets.token_hex(32)
  data['admin'] = data.get('admin') or secrets.token_urlsafe(16)
  for pid in participants:
    if pid not in data['codes']:
      data['codes'][pid] = secrets.token_urlsafe(16)
      changed = True
  if changed:
    tmp = path.with_suffix('.tmp')
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, 'w') as f:
      f.write(json.dumps(data, indent=1, sort_keys=True) + '\n')
    tmp.replace(path)
  os.chmod(path, 0o600)
  return data


def _now():
  return datetime.datetime.now(datetime.timezone.utc).isoformat(
      timespec='milliseconds')


class _Participant:
  """One participant's place in the study (guarded by ``lock``)."""

  def __init__(self, participant_log: log.ParticipantLog, queue: list[int]):
    self.log = participant_log
    self.queue = queue
    self.lock = threading.Lock()
    self.instance = None      # session_lib.Instance of the current query
    self.shown_at = None      # when its current list was shown

  @property
  def position(self) -> int:
    """Instances finished (the index of the current one)."""
    return sum(1 for e in self.log.events if e['event'] == 'end')

  def turns(self, position):
    return [e for e in self.log.events
            if e['event'] == 'turn' and e['instance'] == position]

  @property
  def consent(self) -> bool | None:
    """True (agreed), False (declined) or None (not asked yet)."""
    for e in self.log.events:
      if e['event'] == 'consent':
        return bool(e['agreed'])
    return None


class Study:
  """The study over a built environment: ``view``, ``feedback``, ``end``.

  Args:
    env: the runner's environment (``protocol.environment.Environment``).
    method: the method participants talk to.
    ctx: what the method may read (``protocol.plan.Context``).
    base: the ranking core's ``LoopConfig`` (``num_turns`` = turns per
      instance).
    config: participants, instances each, the log directory, the seed.
    identity: what the logs must have been written under (the runner's
      resolved configuration hash and the study's settings).
  """

  def __init__(self, env, method, ctx, base, config: StudyConfig,
               identity: dict):
    check_participant_ids(config.participants)
    self.env, self.method, self.ctx, self.base = env, method, ctx, base
    self.config = config
    self.queues = assignments(config, len(env.target),
                              self._starts_on_target)
    # A log is checked against what shapes its participant's lists: the
    # run's identity, the study's settings and the participant's own queue
    # (so adding participants keeps the existing ones).
    self.header = json.loads(json.dumps(dict(
        identity, instances=config.instances, seed=config.seed,
        method=method.name, num_turns=base.num_turns,
        flow=config.flow)))
    self.log_dir = pathlib.Path(config.log_dir).absolute()
    self._participants = {}
    self._lock = threading.Lock()      # the participants dict
    self._compute = threading.Lock()   # the method, reasoner and JAX
    self._dir_lock = _lock_dir(self.log_dir)
    self._access = _access(self.log_dir, config.participants)
    self.recovered = {}   # participant -> what a damaged log lost
    for pid in config.participants:  # every log checked now, not on return
      if (self.log_dir / f'{pid}.jsonl').exists():
        p = self.participant(pid)
        if p.log.recovered:
          self.recovered[pid] = p.log.recovered
    self._replay_all()

  def _starts_on_target(self, session: int) -> bool:
    """Whether query ``session``'s first list shows its target on top (a
    practice instance must not: there would be nothing to practise)."""
    shown = instance.Instance(self.env, self.method, session, self.ctx,
                                 self.base).shown
    return int(shown[0]) == int(self.env.target[session])

  def _replay_all(self):
    """Replays every participant's unfinished instance now, so a log whose
    lists this code no longer gives is refused when the server starts (with
    every such log named), not with an error when the participant
    returns."""
    problems = []
    for pid, p in self._participants.items():
      if p.position < len(p.queue) and p.turns(p.position):
        try:
          self._instance(pid, p)
        except log.LogError as e:
          problems.append(str(e))
    if problems:
      self.close()
      raise log.LogError(
          '\n'.join(problems) + '\nRestore those logs, or run the code and '
          'checkpoints that wrote them (their finished instances still go '
          'into study_report); or give those participants other ids.')

  def code(self, pid: str) -> str:
    """The participant's access code (their link: ``/p/<id>/join?code=``)."""
    return self._access['codes'][pid]

  def check_code(self, pid: str, code) -> bool:
    """Whether ``code`` is participant ``pid``'s (constant time)."""
    expected = self._access['codes'].get(pid)
    return (isinstance(code, str) and expected is not None and
            hmac.compare_digest(code.encode(), expected.encode()))

  def admin_token(self) -> str:
    """The administration view's token (its link: ``/admin/join?token=``)."""
    return self._access['admin']

  def check_admin(self, token) -> bool:
    return isinstance(token, str) and hmac.compare_digest(
        token.encode(), self._access['admin'].encode())

  def progress(self) -> list[dict]:
    """Per participant: consent, practice, instances finished, turns and
    errors logged, and what a damaged log lost (the administration view)."""
    rows, practice = [], int(self.config.flow)
    for pid in self.config.participants:
      row = {'participant': pid, 'instances': self.config.instances,
             'consent': '-', 'practice': '-', 'finished': 0, 'turns': 0,
             'errors': 0, 'log': 'not started'}
      if (self.log_dir / f'{pid}.jsonl').exists():
        p = self.participant(pid)
        with p.lock:
          events = list(p.log.events)
          consent = p.consent
        ends = sum(e['event'] == 'end' for e in events)
        begun = any(e['event'] == 'turn' and e['instance'] == 0 and
                    e['turn'] > 0 for e in events)
        row.update(
            consent={True: 'agreed', False: 'declined', None: '-'}[consent]
            if self.config.flow else 'not asked',
            practice=('done' if ends >= 1 else 'begun' if begun else '-')
            if practice else 'none',
            finished=max(ends - practice, 0),
            # Counted instances only (the practice one is instance 0).
            turns=sum(e['event'] == 'turn' and e['turn'] > 0 and
                      e['instance'] >= practice for e in events),
            errors=sum(e['event'] == 'error' for e in events),
            log=('recovered: ' + str(self.recovered[pid])
                 if pid in self.recovered else 'ok'))
      rows.append(row)
    return rows

  def csrf(self, pid: str) -> str:
    """The token every form of ``pid``'s pages carries."""
    return hmac.new(self._access['csrf_key'].encode(), pid.encode(),
                    hashlib.sha256).hexdigest()

  def close(self):
    """Releases the log directory (another server may then use it)."""
    self._dir_lock.close()

  # -- participants -------------------------------------------------------

  def participant(self, pid: str) -> _Participant:
    if not isinstance(pid, str) or not PARTICIPANT_ID.fullmatch(pid):
      raise UnknownParticipant('a participant id is letters, digits, _ and '
                               '- (at most 64)')
    if pid not in self.queues:
      raise UnknownParticipant(f'{pid!r} is not a participant of this study')
    with self._lock:
      if pid not in self._participants:
        participant_log = log.ParticipantLog(
            self.log_dir / f'{pid}.jsonl',
            dict(self.header, participant=pid, queue=self.queues[pid]))
        self._participants[pid] = _Participant(participant_log,
                                               self.queues[pid])
      return self._participants[pid]

  def _instance(self, pid, p: _Participant):
    """The current instance, built (and its turn 0 logged) or replayed."""
    position = p.position
    if position >= len(p.queue) or p.instance is not None:
      return p.instance
    session = p.queue[position]
    logged = p.turns(position)
    start = time.perf_counter()
    with self._compute:
      query_instance = instance.Instance(self.env, self.method, session,
                                      self.ctx, self.base)
      self._check_replay(pid, query_instance, logged[:1], 0)
      for t, row in enumerate(logged[1:], 1):
        query_instance.feedback(row['feedback'])
        self._check_replay(pid, query_instance, [row], t)
    if not logged:
      self._log_turn(p, position, query_instance, query_instance.records[0],
                     raw=None, seconds=time.perf_counter() - start,
                     participant_seconds=None)
    p.instance, p.shown_at = query_instance, time.perf_counter()
    return query_instance

  def _check_replay(self, pid, query_instance, rows, turn):
    if rows and rows[0]['top10'] != query_instance.shown[:10].tolist():
      raise log.LogError(
          f'{self.log_dir / pid}.jsonl: replaying instance session '
          f'{query_instance.session}, turn {turn} gives another list than '
          'the one logged: the log was edited, or written by another version of the '
          'code or its checkpoints')

  def _log_turn(self, p, position, query_instance, record, raw, seconds,
                participant_seconds):
    env = self.env
    p.log.append(dict(
        record, event='turn', instance=position, method=self.method.name,
        session=query_instance.session,
        reference=int(env.reference[query_instance.session]),
        target=int(env.target[query_instance.session]),
        top10=query_instance.shown[:10].tolist(), raw_feedback=raw,
        seconds_system=round(seconds, 4),
        seconds_participant=None if participant_seconds is None else round(
            participant_seconds, 3),
        time=_now()))

  # -- what the page shows ------------------------------------------------

  def completion_code(self, pid: str) -> str:
    """What a participant who finished shows the experimenter (e.g. on a
    crowdsourcing platform): 10 characters derived from the study's key."""
    return hmac.new(self._access['csrf_key'].encode(),
                    f'completed/{pid}'.encode(),
                    hashlib.sha256).hexdigest()[:10].upper()

  def consent(self, pid: str, agreed: bool):
    """Logs the participant's answer to ``CONSENT`` (once; a second answer
    changes nothing)."""
    p = self.participant(pid)
    with p.lock:
      if p.consent is not None:
        return
      try:
        p.log.append({'event': 'consent', 'agreed': bool(agreed),
                      'text_sha256': hashlib.sha256(
                          CONSENT.encode()).hexdigest(), 'time': _now()})
      except OSError as e:  # not saved: asked again
        logging.exception('participant %s: the log write failed', pid)
        raise Retry('Your answer could not be saved (a storage error on the '
                    'server; nothing was recorded). Please answer again.'
                    ) from e

  def view(self, pid: str) -> dict:
    """The participant's current state for the page: ``stage`` is
    ``consent`` (instructions and consent first), ``declined``,
    ``instance`` (``practice`` says whether it is the practice one;
    ``instance`` counts the others from 0) or ``done`` (the debrief, with
    ``completion_code``)."""
    p = self.participant(pid)
    practice = int(self.config.flow)
    base = {'participant': pid, 'instances': len(p.queue) - practice,
            'num_turns': self.base.num_turns}
    with p.lock:
      if self.config.flow and p.consent is None:
        return dict(base, stage='consent', done=False, consent=CONSENT)
      if self.config.flow and p.consent is False:
        return dict(base, stage='declined', done=False)
      query_instance = self._instance(pid, p)
      position = p.position
      # ``instance``: the log's index (what forms post); ``number``: its
      # place among the counted instances (0 for the practice one too).
      out = dict(base, stage='instance', instance=position,
                 number=max(position - practice, 0),
                 practice=position < practice, done=query_instance is None)
      if query_instance is None:
        return dict(out, stage='done', debrief=self.config.debrief or DEBRIEF,
                    completion_code=self.completion_code(pid))
      env = self.env
      s = query_instance.session
      history = []
      for row in p.turns(position)[1:]:
        history.append({'turn': row['turn'], 'question': row['question'],
                        'feedback': row['raw_feedback'],
                        'top1': row['top10'][0]})
      out.update(
          session=s, turn=query_instance.turn,
          num_turns=query_instance.num_turns,
          reference=int(env.reference[s]), target=int(env.target[s]),
          modification=env.modification[s], top1=int(query_instance.shown[0]),
          question=query_instance.question, history=history)
      return out

  # -- what the participant does -----------------------------------------

  def _current(self, pid, instance_index, turn):
    """The participant and instance a form was for; None when the form is
    stale (already answered: a second click or a resent form)."""
    p = self.participant(pid)
    if self.config.flow and not p.consent:
      raise FeedbackError('Read the instructions and give your consent '
                          'first.')
    query_instance = self._instance(pid, p)
    if (query_instance is None or instance_index != p.position or
        turn != query_instance.turn):
      return p, None
    return p, query_instance

  def feedback(self, pid: str, instance_index: int, turn: int, raw: str):
    """Runs the turn after ``turn`` of instance ``instance_index`` on the
    participant's words. ``FeedbackError`` (bad words), ``Retry``
    (reasoning raised; logged) or None; a stale form changes nothing."""
    p = self.participant(pid)   # an unknown id before anything else
    text = instance.clean_feedback(raw)
    with p.lock:
      p, query_instance = self._current(pid, instance_index, turn)
      if query_instance is None:
        return
      if query_instance.turn >= query_instance.num_turns:
        raise FeedbackError(f'This instance has had its '
                            f'{query_instance.num_turns} turns: choose "Found it" '
                            'or "Not found".')
      waited = time.perf_counter() - p.shown_at
      start = time.perf_counter()
      try:
        with self._compute:
          record = query_instance.feedback(text)
      except Exception as e:  # pylint: disable=broad-except
        logging.exception('participant %s, instance %d, turn %d raised',
                          pid, instance_index, turn + 1)
        p.instance = None  # replayed from the log on the next view
        p.log.append({'event': 'error', 'instance': instance_index,
                      'session': query_instance.session, 'turn': turn + 1,
                      'raw_feedback': raw,
                      'error': f'{type(e).__name__}: {e}', 'time': _now()})
        p.instance = None  # replayed from the log on the next view
        raise Retry('The system could not process this feedback (the error '
                    'is logged). Please submit it again.') from e
      seconds = time.perf_counter() - start
      try:
        self._log_turn(p, instance_index, query_instance, record, raw, seconds,
                       waited)
      except OSError as e:  # not saved: the participant stays where it was
        logging.exception('participant %s: the log write failed', pid)
        p.instance = None  # replayed from the log on the next view
        raise Retry('Your feedback could not be saved (a storage error on '
                    'the server; nothing was recorded). Please submit it '
                    'again.') from e
      p.shown_at = time.perf_counter()

  def end(self, pid: str, instance_index: int, turn: int, found: bool):
    """Ends the instance: "Found it" (any turn) or "Not found" (after the
    last turn). A stale form changes nothing."""
    p = self.participant(pid)
    with p.lock:
      p, query_instance = self._current(pid, instance_index, turn)
      if query_instance is None:
        return
      if not found and query_instance.turn < query_instance.num_turns:
        raise FeedbackError('Give feedback, or choose "Found it"; an '
                            'instance ends without the target only after '
                            f'{query_instance.num_turns} turns.')
      try:
        p.log.append({'event': 'end', 'instance': instance_index,
                      'session': query_instance.session,
                      'turn': query_instance.turn,
                      'found': bool(found),
                      'top1': int(query_instance.shown[0]),
                      'seconds_participant': round(
                          time.perf_counter() - p.shown_at, 3),
                      'time': _now()})
      except OSError as e:  # not saved: the instance goes on
        logging.exception('participant %s: the log write failed', pid)
        raise Retry('Your answer could not be saved (a storage error on the '
                    'server; nothing was recorded). Please choose again.'
                    ) from e
      p.instance = None
