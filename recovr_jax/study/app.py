"""The study's web app: FastAPI with server-rendered HTML, no outside assets.

Routes: ``/`` (sign-in with the participant id and access code),
``/p/<id>/join?code=<code>`` (the participant's link), ``/p/<id>`` (the
current instance), ``POST /p/<id>/feedback`` and ``POST /p/<id>/end``
(forms; answered with a redirect to ``/p/<id>`` once the turn is logged),
``/v/<id>/<token>.gif`` (a video the participant's page showed, as an
animation, under an opaque per-participant token; pages are Jinja2
templates in ``templates/``).

Access: a participant's pages and forms need their access code (an
unguessable token in ``<logs>/access.json``, readable by its owner only),
kept in a same-site cookie after the link or the sign-in; every form
carries a CSRF token, and a form posted from another origin is refused;
request bodies are limited to ``MAX_BODY`` bytes. The page lists what appendix D.3
lists: the current top-ranked result beside the target (the search goal),
the system's question (none on the last look, where it could not be
answered), a labelled feedback box, "Found it", the reference video and
the initial modification text, and the interaction history; no video id
or gallery index appears on it.
"""

import hashlib
import hmac
import pathlib
import threading
import urllib.parse

import fastapi
from fastapi import responses
import jinja2
import markupsafe
from starlette import concurrency

from recovr_jax.study import instance
from recovr_jax.study import log
from recovr_jax.study import study

MAX_BODY = 64 * 1024   # bytes of a form (the feedback is at most 1,000 chars)


def _cookie(pid: str) -> str:
  return f'recovr_study_{pid}'


_TEMPLATES = jinja2.Environment(
    loader=jinja2.FileSystemLoader(pathlib.Path(__file__).parent /
                                   'templates'),
    autoescape=True, undefined=jinja2.StrictUndefined)


def _page(template: str, **values) -> str:
  return _TEMPLATES.get_template(template).render(**values)


def _signin(message: str = '') -> str:
  return _page('signin.html', title='Sign in', message=message)


class _Renderer:
  """HTML of a study view (``Study.view``). Videos are shown under opaque
  per-participant URLs (``/v/<pid>/<token>.gif``), never by gallery index
  or video id: an id can name the target's combination or scene."""

  def __init__(self, env, media, key: bytes):
    self.env, self.media, self._key = env, media, key
    self._tokens = {}   # pid -> token -> gallery index
    self._lock = threading.Lock()

  def token(self, pid: str, index: int) -> str:
    token = hmac.new(self._key, f'{pid}/{index}'.encode(),
                     hashlib.sha256).hexdigest()[:24]
    with self._lock:
      self._tokens.setdefault(pid, {})[token] = int(index)
    return token

  def index(self, pid: str, token: str) -> int | None:
    """The gallery index behind a token this participant was shown."""
    with self._lock:
      return self._tokens.get(pid, {}).get(token)

  def video(self, pid: str, index: int) -> dict:
    if self.media is not None and self.media.animation(index) is not None:
      return {'src': f'/v/{urllib.parse.quote(pid)}/'
                     f'{self.token(pid, index)}.gif'}
    return {'src': None, 'caption': self.env.captions[index]}

  def instance(self, view: dict, message: str = '', text: str = '',
               csrf: str = '', confirm: bool = False) -> str:
    pid = view['participant']
    quoted = urllib.parse.quote(pid)
    stage = view.get('stage', 'done' if view['done'] else 'instance')
    if stage == 'consent':
      return _page(
          'consent.html', title='Instructions and consent', message=message,
          consent=view['consent'], num_turns=view['num_turns'],
          instances=view['instances'],
          # About a minute per instance and its turns, and the practice.
          minutes=max(5, round(1.5 * (view['instances'] + 1))),
          consent_url=f'/p/{quoted}/consent',
          hidden=markupsafe.Markup(
              '<input type="hidden" name="csrf" value="{}">').format(csrf))
    if stage == 'declined':
      return _page('declined.html', title='Thank you')
    if stage == 'done':
      return _page('done.html', title='Done', participant=pid,
                   instances=view['instances'],
                   completion_code=view.get('completion_code'),
                   debrief=view.get('debrief', ''))
    last = view['turn'] >= view['num_turns']
    hidden = markupsafe.Markup(
        '<input type="hidden" name="instance" value="{}"><input type="hidden"'
        ' name="turn" value="{}"><input type="hidden" name="csrf" value="{}">'
    ).format(view['instance'], view['turn'], csrf)
    number = view.get('number', view['instance']) + 1
    return _page(
        'instance.html',
        title='Practice' if view.get('practice') else f'Instance {number}',
        practice=view.get('practice', False),
        instance=number, instances=view['instances'],
        turn=view['turn'] + 1, num_turns=view['num_turns'], last=last,
        message=message, text=text, hidden=hidden,
        feedback_url=f'/p/{quoted}/feedback', end_url=f'/p/{quoted}/end',
        page_url=f'/p/{quoted}', confirm=confirm,
        top1=self.video(pid, view['top1']),
        target=self.video(pid, view['target']),
        reference=self.video(pid, view['reference']),
        modification=view['modification'],
        # A question on the last look could not be answered.
        question=None if last else view['question'],
        history=[dict(h, top1=self.video(pid, h['top1']))
                 for h in view['history']])


async def _form(request: fastapi.Request) -> dict:
  """The posted form, read up to ``MAX_BODY`` bytes (413 beyond)."""
  length = request.headers.get('content-length', '0')
  if not length.isdigit() or int(length) > MAX_BODY:
    raise fastapi.HTTPException(413, f'a form is at most {MAX_BODY:,} bytes')
  body = b''
  async for chunk in request.stream():
    body += chunk
    if len(body) > MAX_BODY:
      raise fastapi.HTTPException(413, f'a form is at most {MAX_BODY:,} '
                                  'bytes')
  body = body.decode('utf-8', 'replace')
  return {k: v[0] for k, v in urllib.parse.parse_qs(
      body, keep_blank_values=True).items()}


def _int(form: dict, name: str) -> int:
  try:
    return int(form[name])
  except (KeyError, ValueError) as e:
    raise fastapi.HTTPException(400, f'form field {name!r} must be an '
                                'integer') from e


def make_app(user_study: study.Study, media=None,
             report=None) -> fastapi.FastAPI:
  """The app over ``study``; ``media``: a ``study.media.Media`` (None: every
  video is shown by its caption)."""
  app = fastapi.FastAPI(title='recovr_jax study', docs_url=None,
                        redoc_url=None, openapi_url=None)
  render = _Renderer(user_study.env, media, user_study.csrf('/media').encode())

  def refuse(message):
    return responses.HTMLResponse(_signin(message), status_code=403)

  def page_of(pid, message, text, confirm=False):
    return render.instance(user_study.view(pid), message, text, user_study.csrf(pid),
                           confirm)

  def signed_in(pid, request) -> bool:
    return user_study.check_code(pid, request.cookies.get(_cookie(pid)))

  def same_origin(request) -> bool:
    """A POST's Origin (or Referer), when the browser sends one, names this
    server."""
    origin = request.headers.get('origin') or request.headers.get('referer')
    if not origin:
      return True
    return urllib.parse.urlsplit(origin).netloc == request.headers.get('host')

  async def checked_form(pid, request):
    """The form of a participant's POST, or the refusal to answer."""
    if not same_origin(request):
      return None, refuse('Refused: the form was sent from another site.')
    if not signed_in(pid, request):
      return None, refuse('Sign in with your participant id and access code '
                          '(or open your link).')
    form = await _form(request)
    if not hmac.compare_digest(form.get('csrf', '').encode(),
                               user_study.csrf(pid).encode()):
      return None, refuse('Refused: the form is not one this study showed '
                          'you (reload your page).')
    return form, None

  def enter(pid, code):
    """Signs ``pid`` in with ``code``: a redirect to their page that keeps
    the code in a same-site cookie, or the refusal."""
    try:
      user_study.participant(pid)
    except study.UnknownParticipant as e:
      return refuse(f'Sign-in refused: {e.args[0]}')
    if not user_study.check_code(pid, code):
      return refuse('Sign-in refused: the access code is not this '
                    'participant\'s.')
    response = responses.RedirectResponse(f'/p/{pid}', status_code=303)
    response.set_cookie(_cookie(pid), code, httponly=True, samesite='strict')
    return response

  async def page(pid, message='', text='', status=200, confirm=False):
    body = await concurrency.run_in_threadpool(page_of, pid, message, text,
                                               confirm)
    return responses.HTMLResponse(body, status_code=status)

  @app.exception_handler(log.LogError)
  async def damaged_log(request, e):
    del request
    return responses.HTMLResponse(
        _page('error.html', title='Study log error', message=str(e)),
        status_code=500)

  @app.get('/', response_class=responses.HTMLResponse)
  async def signin_page():
    return _signin()

  @app.post('/signin')
  async def signin(request: fastapi.Request):
    if not same_origin(request):
      return refuse('Refused: the form was sent from another site.')
    form = await _form(request)
    return enter(form.get('participant', '').strip(), form.get('code', ''))

  @app.get('/p/{pid}/join')
  async def join(pid: str, code: str = ''):
    return enter(pid, code)

  @app.get('/p/{pid}', response_class=responses.HTMLResponse)
  async def instance_page(pid: str, request: fastapi.Request):
    if not signed_in(pid, request):
      return refuse('Sign in with your participant id and access code (or '
                    'open your link).')
    try:
      return await page(pid)
    except study.UnknownParticipant as e:
      return refuse(f'Sign-in refused: {e.args[0]}')

  async def act(pid, request, call, text=lambda form: '', first=None):
    """Runs ``call(form)`` on a participant's checked form: a redirect to
    their page, or the page with what went wrong (the words kept).
    ``first(form)``: a page to answer with instead (nothing is run), or
    None."""
    form, refused = await checked_form(pid, request)
    if refused is not None:
      return refused
    if first is not None:
      answer = await first(form)
      if answer is not None:
        return answer
    try:
      await concurrency.run_in_threadpool(call, form)
    except study.UnknownParticipant as e:
      return refuse(f'Sign-in refused: {e.args[0]}')
    except study.FeedbackError as e:
      return await page(pid, str(e), text(form)[:2000], status=400)
    except study.Retry as e:
      return await page(pid, str(e), text(form), status=500)
    return responses.RedirectResponse(f'/p/{pid}', status_code=303)

  def words(form):
    return instance.strip_controls(form.get('feedback', ''))

  @app.post('/p/{pid}/feedback')
  async def feedback(pid: str, request: fastapi.Request):
    return await act(pid, request, lambda form: user_study.feedback(
        pid, _int(form, 'instance'), _int(form, 'turn'), words(form)),
                     text=words)

  @app.post('/p/{pid}/consent')
  async def consent(pid: str, request: fastapi.Request):
    return await act(pid, request, lambda form: user_study.consent(
        pid, form.get('agree') == '1'))

  @app.post('/p/{pid}/end')
  async def end(pid: str, request: fastapi.Request):
    async def confirm_first(form):
      # "Found it" ends the search: asked once more before it is logged.
      if form.get('found') == '1' and form.get('confirm') != '1':
        return await page(pid, confirm=True)
      return None
    return await act(pid, request, lambda form: user_study.end(
        pid, _int(form, 'instance'), _int(form, 'turn'),
        form.get('found') == '1'), first=confirm_first)

  @app.get('/admin/join')
  async def admin_join(token: str = ''):
    if not user_study.check_admin(token):
      return refuse('The administration token is not this study\'s.')
    response = responses.RedirectResponse('/admin', status_code=303)
    response.set_cookie('recovr_study_admin', token, httponly=True,
                        samesite='strict')
    return response

  def is_admin(request) -> bool:
    return user_study.check_admin(request.cookies.get('recovr_study_admin'))

  @app.get('/admin', response_class=responses.HTMLResponse)
  async def admin(request: fastapi.Request, message: str = ''):
    if not is_admin(request):
      return refuse('Open the administration link printed at start.')
    rows = await concurrency.run_in_threadpool(user_study.progress)
    command = ('python -m experiments.study_report <the flags this server '
               'was started with>')
    if report is not None:
      command = ' '.join(report.command)
    return _page('admin.html', title='Study administration',
                 log_dir=str(user_study.log_dir), rows=rows,
                 report_command=command, message=message,
                 report=None if report is None else report.status())

  @app.post('/admin/report')
  async def build_report(request: fastapi.Request):
    """Starts the Table 4 build (the admin's same-origin form)."""
    if not is_admin(request) or not same_origin(request):
      return refuse('Refused: only the administration page can build the '
                    'report.')
    if report is None:
      return refuse('This server was started without a report command.')
    started = await concurrency.run_in_threadpool(report.start)
    message = '' if started else 'already-running'
    return responses.RedirectResponse(
        '/admin' + (f'?message={message}' if message else ''),
        status_code=303)

  @app.get('/admin/table4')
  async def table4(request: fastapi.Request):
    if not is_admin(request):
      return refuse('Open the administration link printed at start.')
    status = None if report is None else report.status()
    if status is None or not status.table:
      raise fastapi.HTTPException(404, 'Table 4 has not been built yet')
    return responses.PlainTextResponse(status.table)

  @app.get('/v/{pid}/{token}.gif')
  async def animation(pid: str, token: str, request: fastapi.Request):
    if not signed_in(pid, request):
      raise fastapi.HTTPException(403, 'sign in first')
    index = render.index(pid, token)
    if index is None:  # not a video this participant's pages showed
      raise fastapi.HTTPException(404, 'no such video')
    data = None if media is None else await concurrency.run_in_threadpool(
        media.animation, index)
    if data is None:
      raise fastapi.HTTPException(404, 'no frames for this video')
    return responses.Response(data, media_type='image/gif',
                              headers={'Cache-Control': 'private, '
                                       'max-age=3600'})

  return app
