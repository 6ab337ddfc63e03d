"""The session viewer: a finished run's sessions, turn by turn, in a browser.

``python -m experiments.view --run_dir=DIR`` serves it (127.0.0.1 by
default). It reads the run's ``trajectories.jsonl``, ``ranks.csv`` and
``resolved_config.json`` (``load``), and shows them with the study's
templates and animations (``templates/``, ``media``): the index lists the
sessions with each method's target rank per turn, filtered by method,
outcome and turn, and by paired outcome (one method shows the target
first at a turn and the other does not, with both counts); a session's page shows the reference, the target and,
per turn and side by side for two methods, the user's feedback, the
system's question, the reasoner's replies (search, edit, sigma, keep,
avoid), whether rank-cap fired, the target's rank and the shown top 10
(frames on the world, ids, scores and the captioning model's captions),
and, with
a ``Truth`` (the world's runs), the target's true values and per turn the
values the user named and the reasoner's search states, each marked
against the target's. The viewer is for the
researcher: unlike the study's pages it names videos by id.

Routes (GET only; a parameter outside what the run holds is a 400 naming
it): ``/?a=<method>&b=<method>&outcome=<outcome>&turn=<t>&paired=<p>&page=<n>``,
``/s/<session>?a=&b=&turn=``, ``/v/<gallery index>.gif``.
"""

import base64
import dataclasses
import pathlib
import re

import fastapi
from fastapi import responses
import jinja2
from starlette import concurrency
from starlette.middleware import trustedhost

from recovr_jax import readers
from recovr_jax import trajectory_files

# What the index can filter on: every session, those whose target was shown
# first at some turn (found) or never, and those with a failure mode
# (docs/definitions.md section 6) at some active transition.
OUTCOMES = ('all', 'found', 'not_found', 'drift', 'stagnation',
            'repeated_top1')
# The paired-outcome filter: at the chosen turn (else the last), the first
# method shows the target first and the second does not, or the reverse.
PAIRED = ('', 'a_not_b', 'b_not_a')
PER_PAGE = 50
# The index's orders: file order, the first method's rank gain from turn 0
# to the chosen turn (largest first), or where the first method is ahead
# of the second by the most ranks at that turn.
SORTS = ('session', 'gain', 'gap')
# The Host headers a viewer answers by default: this machine's names only
# (a web page elsewhere, through DNS rebinding, reaches a loopback server
# under its own name: refused).
LOCAL_HOSTS = ('localhost', '127.0.0.1', '[::1]', '::1')
_NUMBER = re.compile(r'[0-9]{1,9}')  # ASCII digits, a sane length
SHOWN = 10   # the top of each list a session page shows

_TEMPLATES = jinja2.Environment(
    loader=jinja2.FileSystemLoader(pathlib.Path(__file__).parent /
                                   'templates'),
    autoescape=True, undefined=jinja2.StrictUndefined)


@dataclasses.dataclass(frozen=True)
class Videos:
  """What the pages show of gallery video ``i``: ``ids[i]``,
  ``captions[i]`` (or None: no captions) and ``media`` (``media.Media``;
  None: no animations)."""
  ids: tuple | None = None
  captions: tuple | None = None
  media: object = None


@dataclasses.dataclass(frozen=True)
class Truth:
  """What the simulator knows, shown to the researcher beside what the
  method saw (the embedded world's runs; never given to a method):
  ``attributes(gallery index) -> {attribute: value}`` (a video's true
  values), ``named(trajectory row, turn) -> {attribute: value}`` (what the
  user's words at that turn named, the user replayed; None when the replay
  does not give the recorded words) and ``read(text) -> {attribute:
  value}`` (the values a reasoner's reply states, read by the world's
  lexicon: the reasoner writes in its words)."""
  attributes: object
  named: object
  read: object


@dataclasses.dataclass(frozen=True)
class Run:
  """A finished run as the viewer reads it."""
  directory: pathlib.Path
  methods: tuple            # in the run's order
  sessions: tuple           # session numbers, in file order
  num_turns: int            # T (turns 0..T)
  list_length: int          # K (a rank of K + 1: not shown)
  rows: dict                # (method, session) -> trajectories row
  ranks: dict               # (method, session) -> [T + 1] target ranks
  header: str               # the report's first line


def _data_read(resolved: dict) -> dict:
  """What a run's ``resolved_config.json`` says of the data it read: its
  source's settings and its input files' digests."""
  files = resolved.get('files') or {}
  return {'data': resolved.get('data'),
          'files': {k: (v.get('sha256') if isinstance(v, dict) else v)
                    for k, v in files.items()}}


def _short(value) -> str:
  text = repr(value)
  return text if len(text) <= 60 else text[:57] + '...'


def rebuilt_problem(run_dir, rebuilt: dict) -> str | None:
  """Whether the data the viewer rebuilt from a run's ``flags.txt``
  (``rebuilt``: its ``integrity.resolved_config``) is the data the run
  read (its ``resolved_config.json``): None, or a line naming what
  differs (``flags.txt`` edited since, or the inputs changed)."""
  d = pathlib.Path(run_dir)
  old = _data_read(readers.read_json(d / 'resolved_config.json'))
  new = _data_read(rebuilt)
  differ = []
  for part in ('data', 'files'):
    a, b = old[part] or {}, new[part] or {}
    differ += [f'{part}.{k}: {_short(a.get(k))} -> {_short(b.get(k))}'
               for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
  if not differ:
    return None
  return (f'{d / "flags.txt"}: it rebuilds other data than the run read '
          f'({"; ".join(differ[:3])}): edited since the run, or its inputs '
          'changed; pass --nomedia to see ids only')


def _is_number(x) -> bool:
  return isinstance(x, (int, float)) and not isinstance(x, bool)


def _turns_problem(turns) -> str | None:
  """What is wrong with a trajectory's turns as the pages read them (None:
  nothing): each an object, its ``top10`` gallery indices, its
  ``top10_scores`` (when there) numbers."""
  for k, turn in enumerate(turns):
    if not isinstance(turn, dict):
      return f'turn {k} is not an object'
    top = turn.get('top10')
    if not isinstance(top, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in top):
      return f'turn {k}: "top10" is not a list of gallery indices'
    scores = turn.get('top10_scores')
    if scores is not None and (not isinstance(scores, list) or not all(
        x is None or _is_number(x) for x in scores)):
      return f'turn {k}: "top10_scores" is not a list of numbers'
  return None


def load(directory) -> Run:
  """The run in ``directory`` (``readers``: a run that has not finished or
  a damaged file is an error naming the file)."""
  trajectories = trajectory_files.path(directory)
  d = readers.require_finished(
      directory, (trajectories.name, 'ranks.csv', 'resolved_config.json'))
  config = readers.read_json(d / 'resolved_config.json')
  try:
    num_turns = int(config['loop']['num_turns'])
    list_length = int(config['loop']['list_length'])
  except (KeyError, TypeError, ValueError) as e:
    raise readers.FileError(d / 'resolved_config.json',
                            f'no loop.num_turns or loop.list_length ({e!r})'
                            ) from e
  rows, sessions, methods = {}, {}, {}
  for number, row in enumerate(trajectory_files.read(d), start=1):
    if not (isinstance(row, dict) and isinstance(row.get('method'), str)
            and isinstance(row.get('session'), int)
            and isinstance(row.get('turns'), list)
            and all(isinstance(row.get(k), int)
                    for k in ('reference', 'target'))):
      raise readers.FileError(
          trajectories, 'expected a session with "method", '
          '"session", "reference", "target" and "turns"', number, unit='row')
    problem = _turns_problem(row['turns'])
    if problem:
      raise readers.FileError(trajectories, problem, number, unit='row')
    rows[row['method'], row['session']] = row
    sessions.setdefault(row['session'], None)
    methods.setdefault(row['method'], None)
  table = readers.read_csv(d / 'ranks.csv', ('method', 'session', 'turn',
                                             'rank'),
                           types={'session': int, 'turn': int, 'rank': int},
                           written_by_us=True)
  ranks = {key: [list_length + 1] * (num_turns + 1) for key in rows}
  for number, r in zip(table.numbers, table.rows):
    key = (r['method'], r['session'])
    if key not in ranks or not 0 <= r['turn'] <= num_turns:
      raise readers.FileError(d / 'ranks.csv', f'method {r["method"]!r}, '
                              f'session {r["session"]}, turn {r["turn"]} is '
                              'in no trajectory of the run', number,
                              unit='row')
    ranks[key][r['turn']] = r['rank']
  report = d / 'report.md'
  header = (report.read_text(encoding='utf-8').splitlines() or [''])[0] if (
      report.is_file()) else ''
  return Run(directory=d, methods=tuple(methods), sessions=tuple(sessions),
             num_turns=num_turns, list_length=list_length, rows=rows,
             ranks=ranks, header=header.lstrip('# '))


def beside(first: Run, second: Run, label: str | None = None) -> Run:
  """``first`` with ``second``'s methods added as ``<method>@<label>``
  (default label: ``second``'s folder name), for holding two runs of the
  same sessions side by side (e.g. one reader against another). The runs
  must share their sessions (each with its reference and target), turns
  and list length: ``ValueError`` naming what differs."""
  label = label or second.directory.name
  problems = []
  if second.sessions != first.sessions:
    problems.append(f'sessions ({len(second.sessions)} against '
                    f'{len(first.sessions)}, or in another order)')
  for name in ('num_turns', 'list_length'):
    if getattr(first, name) != getattr(second, name):
      problems.append(f'{name} {getattr(second, name)} against '
                      f'{getattr(first, name)}')
  if not problems:
    m1, m2 = first.methods[0], second.methods[0]
    for s in first.sessions:
      a, b = first.rows[m1, s], second.rows[m2, s]
      if (a['reference'], a['target']) != (b['reference'], b['target']):
        problems.append(f'session {s}\'s reference and target')
        break
  if problems:
    raise ValueError(f'{second.directory} is not a run of the same sessions '
                     f'as {first.directory}: its ' + '; '.join(problems))
  named = {m: f'{m}@{label}' for m in second.methods}
  return dataclasses.replace(
      first, methods=first.methods + tuple(named.values()),
      rows={**first.rows, **{(named[m], s): dict(row, method=named[m])
                             for (m, s), row in second.rows.items()}},
      ranks={**first.ranks, **{(named[m], s): r
                               for (m, s), r in second.ranks.items()}},
      header=f'{first.header} | beside it ({label}): {second.header}')


def events(ranks, top1) -> dict:
  """Per outcome, the turns where it happens in one session: ``found``
  (the turn the target was first shown first), and per failure mode the
  turns ``t`` whose active transition ``t-1 -> t`` (the target not yet
  shown first before ``t``) drifted, stagnated or repeated the top-1."""
  out = {k: [] for k in OUTCOMES[1:]}
  found = next((t for t, r in enumerate(ranks) if r == 1), None)
  if found is not None:
    out['found'] = [found]
  else:
    out['not_found'] = [len(ranks) - 1]
  for t in range(1, len(ranks)):
    if min(ranks[:t]) <= 1:
      break
    if ranks[t] > ranks[t - 1]:
      out['drift'].append(t)
    if ranks[t] >= ranks[t - 1]:
      out['stagnation'].append(t)
    if top1[t] == top1[t - 1]:
      out['repeated_top1'].append(t)
  return out


def _top1(row) -> list:
  return [turn['top10'][0] if turn['top10'] else -1 for turn in row['turns']]


class BadRequest(ValueError):
  """A query parameter outside what the run holds."""


class Viewer:
  """The pages of one run (``Run``) and its ``Videos``."""

  def __init__(self, run: Run, videos: Videos = Videos(),
               truth: Truth | None = None):
    self.run, self.videos, self.truth = run, videos, truth
    self._inline = False  # animations inside the page (``static_page``)

  # -- parameters -----------------------------------------------------------
  def method(self, name: str, value: str, optional: bool = False):
    if optional and not value:
      return None
    if value not in self.run.methods:
      raise BadRequest(f'{name}={value!r} is not a method of this run '
                       f'({", ".join(self.run.methods)})')
    return value

  def turn(self, value: str):
    if value in ('', None):
      return None
    if not _NUMBER.fullmatch(value) or int(value) > self.run.num_turns:
      raise BadRequest(f'turn={value!r}: expected 0..{self.run.num_turns}')
    return int(value)

  def session(self, value: str) -> int:
    if not _NUMBER.fullmatch(value) or (self.run.methods[0], int(value)) not in (
        self.run.rows):
      raise BadRequest(f'session {value!r} is not a session of this run')
    return int(value)

  # -- pages -----------------------------------------------------------------
  def video(self, index: int) -> dict:
    """A gallery video as the templates show it."""
    v = self.videos
    index = int(index)
    # Rendered when the browser asks (``/v/<index>.gif``; 404 without
    # frames, the id and caption stay beside it). An index the gallery does
    # not hold (trajectories of another gallery) shows as such.
    size = min((len(x) for x in (v.ids, v.captions) if x is not None),
               default=None)
    if size is not None and not 0 <= index < size:
      return {'index': index, 'src': None, 'caption': '',
              'id': f'{index} (not in the gallery)'}
    # Frames only where the video has them: else its caption stands alone.
    media = v.media is not None and index >= 0 and v.media.has(index)
    src = f'/v/{index}.gif' if media else None
    if media and self._inline:  # a page that opens without the server
      data = v.media.animation(index)
      src = None if data is None else (
          'data:image/gif;base64,' + base64.b64encode(data).decode('ascii'))
    return {'index': index, 'src': src,
            'id': (v.ids[index] if v.ids is not None and index >= 0
                   else str(index)),
            'caption': (v.captions[index] if v.captions is not None and
                        index >= 0 else '')}

  def index(self, a: str = '', b: str = '', outcome: str = 'all',
            turn: str = '', page: str = '1', paired: str = '',
            sort: str = 'session') -> str:
    run = self.run
    a, b, t, at, chosen, counts = self.chosen(a, b, outcome, turn, paired,
                                              sort)
    if not _NUMBER.fullmatch(page) or int(page) < 1:
      raise BadRequest(f'page={page!r}: expected a number from 1')
    pages = max(1, -(-len(chosen) // PER_PAGE))
    number = min(int(page), pages)
    shown = chosen[(number - 1) * PER_PAGE:number * PER_PAGE]
    sides = [m for m in (a, b) if m]
    rows = []
    for s in shown:
      row = run.rows[a, s]
      rows.append({
          'session': s, 'reference': self.video(row['reference']),
          'target': self.video(row['target']),
          'modification': row['turns'][0].get('feedback') or '',
          'ranks': {m: [self._rank(r) for r in run.ranks[m, s]]
                    for m in sides}})
    # Of the chosen sessions, per method and turn: the share whose target
    # is shown first.
    summary = {m: [(f'{100 * sum(run.ranks[m, s][k] == 1 for s in chosen) / len(chosen):.1f}%'
                    if chosen else '-') for k in range(run.num_turns + 1)]
               for m in sides}
    return _TEMPLATES.get_template('view_index.html').render(
        title=f'Sessions: {run.directory.name}', header=run.header,
        methods=run.methods, a=a, b=b or '', outcome=outcome,
        outcomes=OUTCOMES, turn='' if t is None else t, paired=paired,
        counts=counts, at=at, sort=sort, sorts=SORTS, summary=summary,
        turns=range(run.num_turns + 1), rows=rows, sides=sides,
        count=len(chosen), total=len(run.sessions), page=number, pages=pages)

  def export(self, a: str = '', b: str = '', outcome: str = 'all',
             turn: str = '', paired: str = '', sort: str = 'session') -> str:
    """The chosen sessions (as the index chooses and orders them, every
    page) as CSV: session, reference and target ids, and each method's
    target rank per turn (K + 1: not shown)."""
    import csv  # pylint: disable=g-import-not-at-top
    import io  # pylint: disable=g-import-not-at-top
    run = self.run
    a, b, _, _, chosen, _ = self.chosen(a, b, outcome, turn, paired, sort)
    sides = [m for m in (a, b) if m]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator='\n')
    writer.writerow(['session', 'reference_id', 'target_id'] + [
        f'{m}_rank_t{k}' for m in sides for k in range(run.num_turns + 1)])
    for s in chosen:
      row = run.rows[a, s]
      writer.writerow([s, self.video(row['reference'])['id'],
                       self.video(row['target'])['id']] + [
                           int(r) for m in sides for r in run.ranks[m, s]])
    return out.getvalue()

  def chosen(self, a, b, outcome, turn, paired, sort):
    """``(a, b, turn, the turn read, the chosen sessions in order, the
    paired counts)`` of the index's parameters (``BadRequest`` naming a
    bad one)."""
    run = self.run
    a = self.method('a', a or run.methods[0])
    b = self.method('b', b, optional=True)
    if outcome not in OUTCOMES:
      raise BadRequest(f'outcome={outcome!r}: expected one of '
                       f'{", ".join(OUTCOMES)}')
    t = self.turn(turn)
    if sort not in SORTS:
      raise BadRequest(f'sort={sort!r}: expected one of {", ".join(SORTS)}')
    if paired not in PAIRED:
      raise BadRequest(f'paired={paired!r}: expected one of '
                       f'{", ".join(p for p in PAIRED if p)}')
    if paired and not b:
      raise BadRequest(f'paired={paired}: choose the method beside (b)')
    at = run.num_turns if t is None else t
    hit = lambda m, s: run.ranks[m, s][at] == 1
    counts = None if not b else {
        'a_not_b': sum(hit(a, s) and not hit(b, s) for s in run.sessions),
        'b_not_a': sum(hit(b, s) and not hit(a, s) for s in run.sessions)}
    chosen = []
    for s in run.sessions:
      ranks = run.ranks[a, s]
      happened = events(ranks, _top1(run.rows[a, s]))
      if paired:
        keep = (hit(a, s) and not hit(b, s) if paired == 'a_not_b'
                else hit(b, s) and not hit(a, s))
        keep = keep and (outcome == 'all' or bool(happened[outcome]))
      elif outcome == 'all':
        # A turn alone: the sessions still running at that turn.
        keep = t is None or min(ranks[:t] or [run.list_length + 1]) > 1
      else:
        keep = bool(happened[outcome]) and (t is None or
                                            t in happened[outcome])
      if keep:
        chosen.append(s)
    if sort == 'gap' and not b:
      raise BadRequest('sort=gap: choose the method beside (b)')
    if sort == 'gain':  # stable: ties keep the file's order
      chosen.sort(key=lambda s: -(run.ranks[a, s][0] - run.ranks[a, s][at]))
    elif sort == 'gap':
      chosen.sort(key=lambda s: -(run.ranks[b, s][at] - run.ranks[a, s][at]))
    return a, b, t, at, chosen, counts

  def _reading(self, row, turn: int, rec: dict):
    """A feedback turn's attribute rows (with a ``Truth``): the values
    the user's words named and those the reasoner's search states (None
    for a method with no search reply), each marked against the target's
    true values; None otherwise."""
    if self.truth is None or turn == 0 or rec.get('action') in (
        None, 'stopped') or row.get('error'):
      return None
    truth = self.truth.attributes(row['target'])
    named = self.truth.named(row, turn)
    search = rec.get('search')  # a method with a reasoner's search
    return {'named': None if named is None else _marked(named, truth),
            'read': None if search is None else _marked(
                self.truth.read(search), truth)}

  def _rank(self, rank: int) -> str:
    return str(rank) if rank <= self.run.list_length else (
        f'>{self.run.list_length}')

  def static_page(self, session: str, a: str = '', b: str = '',
                  turn: str = '') -> str:
    """``session_page`` as one file that opens without the server: its
    animations inside it (base64 GIFs), without the links and the form
    that ask the server for other pages."""
    self._inline = True
    try:
      return self.session_page(session, a, b, turn, static=True)
    finally:
      self._inline = False

  def session_page(self, session: str, a: str = '', b: str = '',
                   turn: str = '', static: bool = False) -> str:
    run = self.run
    s = self.session(session)
    a = self.method('a', a or run.methods[0])
    b = self.method('b', b, optional=True)
    t = self.turn(turn)
    first = run.rows[a, s]
    sides = []
    for m in (a, b):
      if not m:
        continue
      row = run.rows[m, s]
      turns = []
      for k, rec in enumerate(row['turns']):
        if t is not None and k != t:
          continue
        turns.append({
            'turn': k, 'action': rec.get('action') or '',
            'feedback': rec.get('feedback') or '',
            'question': rec.get('question') or '',
            'asked': rec.get('asked') or '',
            'replies': [(key, rec[key]) for key in
                        ('search', 'edit', 'sigma', 'keep', 'avoid')
                        if rec.get(key) not in (None, '', [])],
            'fired': rec.get('rank_cap_fired'),
            'rank': self._rank(run.ranks[m, s][k]),
            'found': run.ranks[m, s][k] == 1,
            'shown': [dict(self.video(i), target=i == row['target'],
                           score=score)
                      for i, score in zip(rec['top10'][:SHOWN], rec.get(
                          'top10_scores') or [None] * SHOWN)
                      if i >= 0],  # not a pad of a list shorter than K
            'reading': self._reading(row, k, rec)})
      happened = events(run.ranks[m, s], _top1(row))
      sides.append({'method': m, 'turns': turns, 'error': row.get('error'),
                    'outcomes': [k for k, v in happened.items() if v],
                    'scores': score_kind(m)})
    truth = (None if self.truth is None else
             self.truth.attributes(first['target']))
    return _TEMPLATES.get_template('view_session.html').render(
        title=f'Session {s}', header=run.header, session=s,
        truth=truth,
        reference=self.video(first['reference']),
        target=self.video(first['target']),
        modification=first['turns'][0].get('feedback') or '',
        sides=sides, methods=run.methods, a=a, b=b or '',
        turn='' if t is None else t, turns=range(run.num_turns + 1),
        static=static)


# What a method's shown scores are, by its fusion (``LoopConfig``'s
# ``fusion_method``; None: channel 1's list as is).
SCORE_KINDS = {
    None: 'cosine similarity of the query and the video',
    'tw_rrf': 'fused score: time-weighted RRF, a sum of w / (k + rank) over '
              'the channels and recent turns',
    'static_rrf': 'fused score: RRF over the current turn\'s channels',
    'uniform_rrf': 'fused score: RRF with equal turn weights',
    'penalty_rrf': 'fused score: RRF less a penalty',
    'sim_max': 'fused score: the largest cosine similarity over the lists',
    'sim_sum': 'fused score: the sum of cosine similarities over the lists',
}


def score_kind(method: str) -> str:
  """What ``method``'s scores are (``SCORE_KINDS``): RRF sums of about
  0.03 and cosines of about 0.5 are not one scale."""
  from recovr_jax import methods  # pylint: disable=g-import-not-at-top
  from recovr_jax.protocol import ranking  # pylint: disable=g-import-not-at-top
  method = method.split('@')[0]  # a method of a run beside (``beside``)
  try:
    fusion = methods.make(method).ranking(ranking.LoopConfig()).fusion_method
  except (KeyError, ValueError):
    return 'the method\'s score'
  return SCORE_KINDS.get(fusion, 'the method\'s score')


def _marked(values: dict, truth: dict) -> list[dict]:
  """``values`` as the page lists them, each marked right or wrong
  against the target's ``truth``."""
  return [{'attribute': a, 'value': v, 'right': truth.get(a) == v}
          for a, v in values.items()]


def make_app(viewer: Viewer, hosts=LOCAL_HOSTS) -> fastapi.FastAPI:
  """The FastAPI app of ``viewer`` (read-only: GET routes only),
  answering requests whose Host is one of ``hosts`` (``('*',)``: any)."""
  app = fastapi.FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
  app.add_middleware(trustedhost.TrustedHostMiddleware,
                     allowed_hosts=list(hosts))

  def page(render, **params):
    try:
      return responses.HTMLResponse(render(**params))
    except BadRequest as e:
      return responses.HTMLResponse(
          _TEMPLATES.get_template('error.html').render(
              title='Bad request', heading='Not in this run',
              message=str(e)), status_code=400)

  @app.get('/', response_class=responses.HTMLResponse)
  async def index(a: str = '', b: str = '', outcome: str = 'all',
                  turn: str = '', page_number: str = fastapi.Query(
                      '1', alias='page'), paired: str = '',
                  sort: str = 'session'):
    return page(viewer.index, a=a, b=b, outcome=outcome, turn=turn,
                page=page_number, paired=paired, sort=sort)

  @app.get('/export.csv', response_class=responses.PlainTextResponse)
  async def export(a: str = '', b: str = '', outcome: str = 'all',
                   turn: str = '', paired: str = '', sort: str = 'session'):
    try:
      text = viewer.export(a=a, b=b, outcome=outcome, turn=turn,
                           paired=paired, sort=sort)
    except BadRequest as e:
      return responses.PlainTextResponse(str(e), status_code=400)
    return responses.Response(text, media_type='text/csv', headers={
        'Content-Disposition': 'attachment; filename="sessions.csv"'})

  @app.get('/s/{session}', response_class=responses.HTMLResponse)
  async def session(session: str, a: str = '', b: str = '', turn: str = ''):
    return page(viewer.session_page, session=session, a=a, b=b, turn=turn)

  @app.get('/v/{index}.gif')
  async def animation(index: int):
    media = viewer.videos.media
    try:
      data = None if media is None else await (
          concurrency.run_in_threadpool(media.animation, index))
    except KeyError as e:
      raise fastapi.HTTPException(404, str(e)) from e
    if data is None:
      raise fastapi.HTTPException(404, 'no frames for this video')
    return responses.Response(data, media_type='image/gif',
                              headers={'Cache-Control': 'max-age=3600'})

  return app
