"""The study's web app: FastAPI with server-rendered HTML, no outside assets.

Routes: ``/`` (sign-in with the participant id and access code),
``/p/<id>/join?code=<code>`` (the participant's link), ``/p/<id>`` (the
current instance), ``POST /p/<id>/feedback`` and ``POST /p/<id>/end``
(forms; answered with a redirect to ``/p/<id>`` once the turn is logged),
``/media/<index>.gif`` (gallery video ``index`` as an animation).

Access: a participant's pages and forms need their access code (an
unguessable token in ``<logs>/access.json``, readable by its owner only),
kept in a same-site cookie after the link or the sign-in; every form
carries a CSRF token, and a form posted from another origin is refused;
request bodies are limited to ``MAX_BODY`` bytes. The page lists what appendix D.3
lists: the reference video, the current top-ranked result, the initial
modification text, the system's question, a feedback box, "Found it", the
interaction history, and the target at the bottom as the search goal.
"""

import hmac
import html
import urllib.parse

import fastapi
from fastapi import responses
from starlette import concurrency

from recovr_jax.study import log as log_lib
from recovr_jax.study import session as session_lib
from recovr_jax.study import study as study_lib

MAX_BODY = 64 * 1024   # bytes of a form (the feedback is at most 1,000 chars)


def _cookie(pid: str) -> str:
  return f'recovr_study_{pid}'


_STYLE = """
body { font-family: sans-serif; max-width: 60rem; margin: 1rem auto;
       padding: 0 1rem; color: #222; }
section { border: 1px solid #ccc; border-radius: 6px; padding: .6rem 1rem;
          margin: .8rem 0; }
.row { display: flex; gap: 1.5rem; flex-wrap: wrap; }
figure { margin: 0; }
figcaption { font-size: .8rem; color: #555; }
img.video { image-rendering: pixelated; border: 1px solid #999; }
img.small { width: 64px; height: 64px; image-rendering: pixelated; }
.caption { max-width: 16rem; font-style: italic; }
.question { background: #eef5ff; }
.message { background: #fff1e6; border-color: #f0a060; }
.goal { background: #f3fff0; }
textarea { width: 100%; box-sizing: border-box; }
table { border-collapse: collapse; width: 100%; }
td, th { border-bottom: 1px solid #ddd; padding: .3rem; text-align: left;
         vertical-align: top; }
button { font-size: 1rem; margin: .3rem .5rem .3rem 0; }
"""


def _page(title: str, body: str) -> str:
  return (f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
          f'<title>{html.escape(title)}</title><style>{_STYLE}</style>'
          f'</head><body>{body}</body></html>')


def _signin(message: str = '') -> str:
  note = (f'<section class="message" id="message">{html.escape(message)}'
          '</section>' if message else '')
  return _page('Sign in', f"""
<h1>Composed video retrieval study</h1>{note}
<form method="post" action="/signin">
<label>Participant id <input name="participant" id="participant"
 autofocus required maxlength="64"></label>
<label>Access code <input name="code" id="code" required maxlength="64"
 type="password"></label>
<button type="submit" id="signin">Start</button></form>""")


class _Renderer:
  """HTML of a study view (``Study.view``)."""

  def __init__(self, env, media):
    self.env, self.media = env, media

  def video(self, index: int, label: str, small: bool = False) -> str:
    vid = (self.env.video_ids[index] if self.env.video_ids
           else f'video {index}')
    if self.media is not None and self.media.animation(index) is not None:
      size = '' if small else f' width="{self.media.size}"'
      cls = 'small' if small else 'video'
      inner = (f'<img class="{cls}" src="/media/{index}.gif"{size} '
               f'alt="{html.escape(label)}: {html.escape(vid)}">')
    else:  # no frames: the caption stands in
      inner = (f'<div class="caption">{html.escape(self.env.captions[index])}'
               '</div>')
    if small:
      return inner
    return (f'<figure>{inner}<figcaption>{html.escape(label)} '
            f'({html.escape(vid)})</figcaption></figure>')

  def instance(self, view: dict, message: str = '', text: str = '',
               csrf: str = '') -> str:
    pid = html.escape(view['participant'])
    if view['done']:
      return _page('Done', f'<h1>Thank you, {pid}</h1><p id="done">All '
                   f'{view["instances"]} instances are done.</p>')
    last = view['turn'] >= view['num_turns']
    hidden = (f'<input type="hidden" name="instance" '
              f'value="{view["instance"]}"><input type="hidden" name="turn" '
              f'value="{view["turn"]}"><input type="hidden" name="csrf" '
              f'value="{html.escape(csrf)}">')
    parts = [f'<h1>Instance {view["instance"] + 1} of {view["instances"]}'
             f'</h1><p>Participant {pid}: turn {view["turn"]} of '
             f'{view["num_turns"]} feedback turns.</p>']
    if message:
      parts.append(f'<section class="message" id="message">'
                   f'{html.escape(message)}</section>')
    parts.append(
        '<section><h2>Query</h2><div class="row">' +
        self.video(view['reference'], 'Reference video') +
        self.video(view['top1'], 'Current top-ranked result') +
        '</div><p>Initial modification: <b id="modification">'
        f'{html.escape(view["modification"])}</b></p></section>')
    if view['question']:
      parts.append('<section class="question"><h2>System question</h2>'
                   f'<p id="question">{html.escape(view["question"])}</p>'
                   '</section>')
    found = (f'<form method="post" action="/p/{pid}/end">{hidden}'
             '<input type="hidden" name="found" value="1">'
             '<button type="submit" id="found">Found it</button></form>')
    if last:
      parts.append(
          '<section><h2>Last turn</h2><p>Is the top-ranked result the '
          f'target?</p>{found}<form method="post" action="/p/{pid}/end">'
          f'{hidden}<input type="hidden" name="found" value="0">'
          '<button type="submit" id="not-found">Not found: next instance'
          '</button></form></section>')
    else:
      parts.append(
          f'<section><h2>Your feedback</h2><form method="post" '
          f'action="/p/{pid}/feedback">{hidden}<textarea name="feedback" '
          'id="feedback" rows="3" maxlength="1000" placeholder="How should '
          'the result change? Answer the question or describe the target.">'
          f'{html.escape(text)}</textarea><button type="submit" id="send">'
          f'Send feedback</button></form>{found}</section>')
    if view['history']:
      rows = ''.join(
          f'<tr><td>{h["turn"]}</td><td>{html.escape(h["question"] or "")}'
          f'</td><td>{html.escape(h["feedback"] or "")}</td><td>'
          f'{self.video(h["top1"], "top result", small=True)}</td></tr>'
          for h in view['history'])
      parts.append('<section><h2>History</h2><table id="history"><tr><th>'
                   'Turn</th><th>Question</th><th>Your feedback</th><th>Top '
                   f'result</th></tr>{rows}</table></section>')
    parts.append('<section class="goal"><h2>Search goal (target video)</h2>' +
                 self.video(view['target'], 'Target') + '</section>')
    return _page(f'Instance {view["instance"] + 1}', ''.join(parts))


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


def make_app(study: study_lib.Study, media=None) -> fastapi.FastAPI:
  """The app over ``study``; ``media``: a ``study.media.Media`` (None: every
  video is shown by its caption)."""
  app = fastapi.FastAPI(title='recovr_jax study', docs_url=None,
                        redoc_url=None, openapi_url=None)
  render = _Renderer(study.env, media)

  def refuse(message):
    return responses.HTMLResponse(_signin(message), status_code=403)

  def page_of(pid, message, text):
    return render.instance(study.view(pid), message, text, study.csrf(pid))

  def signed_in(pid, request) -> bool:
    return study.check_code(pid, request.cookies.get(_cookie(pid)))

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
                               study.csrf(pid).encode()):
      return None, refuse('Refused: the form is not one this study showed '
                          'you (reload your page).')
    return form, None

  def enter(pid, code):
    """Signs ``pid`` in with ``code``: a redirect to their page that keeps
    the code in a same-site cookie, or the refusal."""
    try:
      study.participant(pid)
    except study_lib.UnknownParticipant as e:
      return refuse(f'Sign-in refused: {e.args[0]}')
    if not study.check_code(pid, code):
      return refuse('Sign-in refused: the access code is not this '
                    'participant\'s.')
    response = responses.RedirectResponse(f'/p/{pid}', status_code=303)
    response.set_cookie(_cookie(pid), code, httponly=True, samesite='strict')
    return response

  async def page(pid, message='', text='', status=200):
    body = await concurrency.run_in_threadpool(page_of, pid, message, text)
    return responses.HTMLResponse(body, status_code=status)

  @app.exception_handler(log_lib.LogError)
  async def damaged_log(request, e):
    del request
    return responses.HTMLResponse(
        _page('Study log error', '<h1>The study cannot continue this '
              f'participant</h1><p id="message">{html.escape(str(e))}</p>'),
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
    except study_lib.UnknownParticipant as e:
      return refuse(f'Sign-in refused: {e.args[0]}')

  @app.post('/p/{pid}/feedback')
  async def feedback(pid: str, request: fastapi.Request):
    form, refused = await checked_form(pid, request)
    if refused is not None:
      return refused
    raw = session_lib.strip_controls(form.get('feedback', ''))
    try:
      await concurrency.run_in_threadpool(
          study.feedback, pid, _int(form, 'instance'), _int(form, 'turn'),
          raw)
    except study_lib.UnknownParticipant as e:
      return refuse(f'Sign-in refused: {e.args[0]}')
    except study_lib.FeedbackError as e:
      return await page(pid, str(e), raw[:2000], status=400)
    except study_lib.Retry as e:
      return await page(pid, str(e), raw, status=500)
    return responses.RedirectResponse(f'/p/{pid}', status_code=303)

  @app.post('/p/{pid}/end')
  async def end(pid: str, request: fastapi.Request):
    form, refused = await checked_form(pid, request)
    if refused is not None:
      return refused
    try:
      await concurrency.run_in_threadpool(
          study.end, pid, _int(form, 'instance'), _int(form, 'turn'),
          form.get('found') == '1')
    except study_lib.UnknownParticipant as e:
      return refuse(f'Sign-in refused: {e.args[0]}')
    except study_lib.FeedbackError as e:
      return await page(pid, str(e), status=400)
    except study_lib.Retry as e:
      return await page(pid, str(e), status=500)
    return responses.RedirectResponse(f'/p/{pid}', status_code=303)

  @app.get('/media/{index}.gif')
  async def animation(index: int, request: fastapi.Request):
    if not any(study.check_code(pid, request.cookies.get(_cookie(pid)))
               for pid in study.queues):
      raise fastapi.HTTPException(403, 'sign in first')
    try:
      data = None if media is None else await concurrency.run_in_threadpool(
          media.animation, index)
    except KeyError as e:
      raise fastapi.HTTPException(404, 'no such video') from e
    if data is None:
      raise fastapi.HTTPException(404, 'no frames for this video')
    return responses.Response(data, media_type='image/gif',
                              headers={'Cache-Control': 'max-age=3600'})

  return app
