r"""Time a study participant waits per turn, over HTTP against the real app.

    python -m experiments.bench.bench_study --flagfile=experiments/flagfiles/study \
        --output_dir=out/bench_study --participants=p01,p02 --instances=10 \
        --output_json=results/bench_study.json \
        --screenshot=results/study_page.png

serves the study app (``experiments/study.py``, same flags) on a free local
port in this process and drives every participant's instances through it:
the scripted participant types the simulated user's words for the shown
result (so the loop behaves as in a run) and presses "Found it" when the
user would stop. Per feedback turn it times what a person waits: the POST,
the redirected page and the new top result's animation. Not a human study:
only the waits are measured. With ``--screenshot`` (needs chromium and
chromedriver) headless Chromium signs in as one more participant, answers
two turns, and saves the page.
"""

import json
import logging
import pathlib
import re
import shutil
import socket
import statistics
import threading
import time

from absl import app
from absl import flags
import httpx
import numpy as np

from experiments.common import cli
from experiments import run
from experiments import study
from recovr_jax.envs.world import world_source
from recovr_jax.run import assemble
from recovr_jax.run import run_config
from recovr_jax.run import runner

_OUTPUT_JSON = flags.DEFINE_string('output_json', None,
                                   'Write the measurements here.')
_SCREENSHOT = flags.DEFINE_string(
    'screenshot', None, 'Save a headless-Chromium screenshot of the page '
    '(after two turns of the last participant) to this .png.')


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


def serve(the_app):
  """``(server, port)``: uvicorn on a free local port in a thread."""
  import uvicorn  # pylint: disable=g-import-not-at-top
  port = _free_port()
  server = uvicorn.Server(uvicorn.Config(the_app, host='127.0.0.1', port=port,
                                         log_level='warning'))
  threading.Thread(target=server.run, daemon=True).start()
  while not server.started:
    time.sleep(0.05)
  return server, port


def _media(client, page: str):
  """Fetches every video a page shows (its opaque URLs)."""
  for src in sorted(set(re.findall(r'src="(/v/[^"]+\.gif)"', page))):
    client.get(src).raise_for_status()


def _drive(client, the_study, user, pid, waits, starts):
  client.get(f'/p/{pid}/join', params={'code': the_study.code(pid)},
             follow_redirects=True).raise_for_status()   # the link
  csrf = the_study.csrf(pid)
  if the_study.view(pid).get('stage') == 'consent':
    client.post(f'/p/{pid}/consent', data={'agree': '1', 'csrf': csrf},
                follow_redirects=True).raise_for_status()
  while True:
    view = the_study.view(pid)
    if view['done']:
      return
    while True:
      s, t = view['session'], view['turn']
      fb = user(s, t + 1, view['target'], view['top1'], view['question'])
      if fb.action == 'stop' or t == view['num_turns']:
        start = time.perf_counter()   # the next instance's turn 0
        r = client.post(f'/p/{pid}/end', data={
            'instance': view['instance'], 'turn': t, 'csrf': csrf,
            'found': '1' if view['top1'] == view['target'] else '0',
            'confirm': '1'},   # "Found it" and its confirmation
                        follow_redirects=True)
        r.raise_for_status()
        view = the_study.view(pid)
        if not view['done']:
          _media(client, r.text)
          starts.append(time.perf_counter() - start)
        break
      start = time.perf_counter()
      r = client.post(f'/p/{pid}/feedback', data={
          'instance': view['instance'], 'turn': t, 'feedback': fb.text,
          'csrf': csrf},
                      follow_redirects=True)
      r.raise_for_status()
      view = the_study.view(pid)
      _media(client, r.text)
      waits.append(time.perf_counter() - start)


def _screenshot(port, pid, path, the_study, user):
  chrome = shutil.which('chromium') or shutil.which('chromium-browser')
  driver = shutil.which('chromedriver')
  if not (chrome and driver):
    raise app.UsageError('--screenshot needs chromium and chromedriver')
  from selenium import webdriver  # pylint: disable=g-import-not-at-top
  from selenium.webdriver.chrome import service  # pylint: disable=g-import-not-at-top
  from selenium.webdriver.common.by import By  # pylint: disable=g-import-not-at-top
  from selenium.webdriver.support import ui  # pylint: disable=g-import-not-at-top
  options = webdriver.ChromeOptions()
  options.binary_location = chrome
  for arg in ('--headless=new', '--no-sandbox', '--disable-dev-shm-usage',
              '--window-size=1280,800'):
    options.add_argument(arg)
  b = webdriver.Chrome(service=service.Service(driver), options=options)
  try:
    b.get(f'http://127.0.0.1:{port}/')
    b.find_element(By.ID, 'participant').send_keys(pid)
    b.find_element(By.ID, 'code').send_keys(the_study.code(pid))
    b.find_element(By.ID, 'signin').click()
    if the_study.view(pid).get('stage') == 'consent':
      ui.WebDriverWait(b, 60).until(lambda d: 'id="agree"' in d.page_source)
      b.find_element(By.ID, 'agree').click()
    for t in (1, 2):
      ui.WebDriverWait(b, 60).until(
          lambda d, t=t: f'feedback {t} of' in d.page_source)
      view = the_study.view(pid)
      fb = user(view['session'], t, view['target'], view['top1'],
                view['question'])
      b.find_element(By.ID, 'feedback').send_keys(
          fb.text or 'that is it, but brighter')
      b.find_element(By.ID, 'send').click()
    ui.WebDriverWait(b, 60).until(lambda d: 'feedback 3 of' in d.page_source)
    time.sleep(1.0)  # the animations decode
    b.save_screenshot(path)
  finally:
    b.quit()


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  config = study.checked_config()
  if not isinstance(config.data, world_source.WorldData):
    raise app.UsageError('bench_study scripts the embedded world\'s '
                         'simulated user: --data=world')
  run.use_compilation_cache(config)
  start = time.perf_counter()
  run_ = assemble.assemble(config, runner.build(config,
                                               run_config.source(config)))
  the_study, media = study.assembled_study(
      run_, participants_are='scripted (the simulated user\'s words)')
  load_s = time.perf_counter() - start
  user = run_.user
  from recovr_jax.study import app as app_lib  # pylint: disable=g-import-not-at-top
  server, port = serve(app_lib.make_app(the_study, media))
  pids = list(the_study.config.participants)
  shot_pid = pids.pop() if _SCREENSHOT.value else None
  waits, starts = [], []
  logging.getLogger('httpx').setLevel(logging.WARNING)
  try:
    with httpx.Client(base_url=f'http://127.0.0.1:{port}') as client:
      for pid in pids:
        _drive(client, the_study, user, pid, waits, starts)
        print(f'{pid}: done, {len(waits)} feedback turns timed', flush=True)
    if shot_pid:
      _screenshot(port, shot_pid, _SCREENSHOT.value, the_study, user)
      print(f'wrote {_SCREENSHOT.value}')
  finally:
    server.should_exit = True
  server_s = [e['seconds_system'] for pid in pids for e in json.loads(
      '[' + ','.join((the_study.log_dir / f'{pid}.jsonl').read_text()
                     .splitlines()) + ']')
              if e['event'] == 'turn' and e['turn'] > 0]
  out = {'participants_driven': len(pids), 'feedback_turns': len(waits),
         'wait_median_s': statistics.median(waits),
         'wait_p90_s': float(np.percentile(waits, 90)),
         'wait_worst_s': max(waits),
         'next_instances': len(starts),
         'next_instance_median_s': statistics.median(starts),
         'next_instance_worst_s': max(starts),
         'server_median_s': statistics.median(server_s),
         'server_worst_s': max(server_s),
         'startup_s': round(load_s, 1),
         'method': config.methods[0], 'reasoner': config.reasoner.name,
         'num_turns': config.loop.num_turns,
         'note': ('wait = POST feedback -> redirected page -> new top '
                  "result's GIF, client side over local HTTP; next instance = "
                  '"Found it"/"Not found" -> the next instance\'s page '
                  '(its turn-0 ranking) and its three GIFs; server = the '
                  "turn's compute as logged (seconds_system)")}
  print(json.dumps(out, indent=2))
  if _OUTPUT_JSON.value:
    pathlib.Path(_OUTPUT_JSON.value).write_text(json.dumps(out, indent=2) +
                                                '\n')


if __name__ == '__main__':
  cli.run(main, (('Study benchmark', ['output_json', 'screenshot']),) +
          run.HELP_GROUPS, run.HELP_DEFAULTS, own=1)
