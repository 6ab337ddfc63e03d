"""A web app served in a thread and headless Chromium pointed at it, for
the browser tests (the study's and the viewer's).

Needs Debian's ``chromium`` and ``chromium-driver``; ``.ci/run`` installs
them and sets ``RECOVR_REQUIRE_BROWSER=1``, under which a missing browser
fails the test instead of skipping it.
"""

import os
import pathlib
import shutil
import socket
import threading
import time


def _paths():
  chrome = shutil.which('chromium') or shutil.which('chromium-browser')
  return chrome, shutil.which('chromedriver')


def free_port() -> int:
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


def png_width(path) -> int:
  """The pixel width in a PNG's header."""
  return int.from_bytes(pathlib.Path(path).read_bytes()[16:20], 'big')


def require(test) -> tuple[str, str]:
  """Chromium's and chromedriver's paths, or the test skipped (failed
  under ``RECOVR_REQUIRE_BROWSER=1``)."""
  chrome, driver = _paths()
  if not (chrome and driver):
    if os.environ.get('RECOVR_REQUIRE_BROWSER') == '1':
      test.fail('chromium and chromedriver are required '
                '(apt-get install chromium chromium-driver)')
    test.skipTest('no chromium/chromedriver on this machine')
  return chrome, driver


def serve(test, app):
  """``(browser, port)``: ``app`` served on a free port in a thread and a
  1280x800 headless Chromium; both stopped when ``test`` ends."""
  chrome, driver = require(test)
  import uvicorn  # pylint: disable=g-import-not-at-top
  from selenium import webdriver  # pylint: disable=g-import-not-at-top
  from selenium.webdriver.chrome import service  # pylint: disable=g-import-not-at-top
  port = free_port()
  server = uvicorn.Server(uvicorn.Config(app, host='127.0.0.1', port=port,
                                         log_level='warning'))
  thread = threading.Thread(target=server.run, daemon=True)
  thread.start()
  deadline = time.time() + 30
  while not server.started:
    test.assertLess(time.time(), deadline, 'the app did not start')
    time.sleep(0.05)
  options = webdriver.ChromeOptions()
  options.binary_location = chrome
  for arg in ('--headless=new', '--no-sandbox', '--disable-dev-shm-usage',
              '--disable-gpu', '--window-size=1280,800'):
    options.add_argument(arg)
  browser = webdriver.Chrome(service=service.Service(driver), options=options)

  def stop():
    browser.quit()
    server.should_exit = True
    thread.join(timeout=10)
  test.addCleanup(stop)
  return browser, port
