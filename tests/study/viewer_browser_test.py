"""The session viewer in a real browser: headless Chromium through the
index, its filters and a session with two methods side by side, at
1280x800 and 390 px (``tests.helpers.browser``: a missing Chromium skips, or fails under
``RECOVR_REQUIRE_BROWSER=1``). ``VIEWER_SCREENSHOT=<path.png>`` keeps
the session page's screenshot at 1280 px (``<path>_turns.png``: scrolled
to turn 1), and ``<path>_session_390.png``
and ``<path>_index_390.png`` at 390 px."""

import json
import os
import pathlib
import tempfile

from absl.testing import absltest

from recovr_jax.study import media
from recovr_jax.study import viewer
from tests.helpers import browser
from tests.study import viewer_test


class ViewerBrowserTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    directory = viewer_test.write_run(pathlib.Path(tempfile.mkdtemp()) / 'run')
    # ReCoVR's first feedback of session 2 runs long: its turn-1 cell is
    # much taller than IVR's, and turn 2 must still start level.
    path = directory / 'trajectories.jsonl'
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for row in rows:
      if row['method'] == 'recovr' and row['session'] == 2:
        row['turns'][1]['feedback'] += ' and more' * 150
    path.write_text(''.join(json.dumps(r, sort_keys=True) + '\n'
                            for r in rows))
    run = viewer.load(directory)
    videos = viewer.Videos(
        ids=viewer_test.IDS, captions=tuple(f'caption {i}' for i in range(12)),
        media=media.Media(12, viewer_test.frames_of, 64))
    truth = viewer.Truth(
        attributes=lambda i: {'shape': 'circle', 'colour': 'red'},
        named=lambda row, t: {'colour': 'red'},
        read=lambda text: {'colour': 'red', 'shape': 'square'})
    self.browser, self.port = browser.serve(
        self, viewer.make_app(viewer.Viewer(run, videos, truth)))

  def test_filter_open_and_compare_in_chromium(self):
    from selenium.webdriver.common.by import By  # pylint: disable=g-import-not-at-top
    from selenium.webdriver.support import select  # pylint: disable=g-import-not-at-top
    from selenium.webdriver.support import ui  # pylint: disable=g-import-not-at-top
    b = self.browser

    def wait_for(text):
      ui.WebDriverWait(b, 60).until(lambda d: text in d.page_source)
    shot = os.environ.get('VIEWER_SCREENSHOT') or str(
        pathlib.Path(tempfile.mkdtemp()) / 'viewer.png')
    narrow = lambda kind: shot.replace('.png', f'_{kind}_390.png')
    # The index on a phone: every column, the ranks included, without
    # scrolling sideways.
    b.set_window_size(390, 844)
    b.get(f'http://127.0.0.1:{self.port}/?b=ivr')
    wait_for('3 of 3 sessions')
    self.assertTrue(b.execute_script(
        'return document.documentElement.scrollWidth <= window.innerWidth'))
    for cell in b.find_elements(By.CSS_SELECTOR, 'td.rank'):
      self.assertTrue(cell.is_displayed())
      self.assertLessEqual(cell.rect['x'] + cell.rect['width'], 390)
      # Its ranks inside its box (they wrap between turns): none hidden
      # past the cell's edge.
      self.assertLessEqual(cell.get_property('scrollWidth'),
                           cell.get_property('clientWidth'), cell.text)
    self.assertTrue(b.save_screenshot(narrow('index')))
    b.set_window_size(1280, 800)
    b.get(f'http://127.0.0.1:{self.port}/')
    wait_for('3 of 3 sessions')
    # Filter: ReCoVR's sessions where it drifted, IVR beside it.
    select.Select(b.find_element(By.ID, 'outcome')).select_by_value('drift')
    select.Select(b.find_element(By.ID, 'b')).select_by_value('ivr')
    b.find_element(By.ID, 'apply').click()
    wait_for('1 of 3 sessions')
    links = b.find_elements(By.CSS_SELECTOR, 'a.open')
    self.assertEqual([a.text for a in links], ['2'])
    links[0].click()
    wait_for('id="side-2"')
    sides = [b.find_element(By.ID, f'side-{k}') for k in (1, 2)]
    self.assertEqual([s.get_attribute('data-method') for s in sides],
                     ['recovr', 'ivr'])
    left, right = (s.rect for s in sides)
    self.assertGreater(right['x'], left['x'] + left['width'] - 1)  # apart
    self.assertAlmostEqual(right['y'], left['y'], delta=2)
    images = b.find_elements(By.CSS_SELECTOR, 'img')
    self.assertGreater(len(images), 20)
    ui.WebDriverWait(b, 60).until(lambda d: all(d.execute_script(
        'return arguments[0].complete && arguments[0].naturalWidth > 0', i)
                                                for i in images))
    # Each turn is one row across the two methods, however long a side's
    # replies: the cells of a turn start level.
    for t in range(3):
      cells = [b.find_element(By.CSS_SELECTOR,
                              f'#side-{k} .turn[data-turn="{t}"]')
               for k in (1, 2)]
      self.assertAlmostEqual(cells[0].rect['y'], cells[1].rect['y'],
                             delta=2, msg=f'turn {t}')
      # And below the turn before it, not over it (the grid had a row too
      # few once the score label joined the side's head: the last turns
      # were drawn over each other).
      if t:
        for k in (1, 2):
          above = b.find_element(
              By.CSS_SELECTOR, f'#side-{k} .turn[data-turn="{t - 1}"]').rect
          self.assertGreaterEqual(cells[k - 1].rect['y'],
                                  above['y'] + above['height'] - 1,
                                  f'side {k} turn {t}')
    self.assertIn('recovr search 2.1', sides[0].text)
    self.assertIn('rank-cap fired', sides[0].text)
    # The attribute rows: the target's true values beside its model
    # caption; per turn what the user named and the search reads, a value
    # other than the target's marked.
    self.assertIn('shape circle, colour red',
                  b.find_element(By.ID, 'target-truth').text)
    self.assertTrue(b.find_element(By.ID, 'target-caption').is_displayed())
    self.assertIn('user named\ncolour red', sides[0].text)
    self.assertIn('search reads\ncolour red, shape square ✗', sides[0].text)
    self.assertTrue(b.save_screenshot(shot))
    b.execute_script('arguments[0].scrollIntoView()', b.find_element(
        By.CSS_SELECTOR, '#side-1 .turn[data-turn="1"]'))
    self.assertTrue(b.save_screenshot(shot.replace('.png', '_turns.png')))
    # On a phone the two methods stack, and nothing scrolls sideways.
    b.set_window_size(390, 844)
    left, right = (s.rect for s in sides)
    self.assertGreater(right['y'], left['y'] + left['height'] - 1)
    self.assertTrue(b.execute_script(
        'return document.documentElement.scrollWidth <= window.innerWidth'))
    self.assertTrue(b.save_screenshot(narrow('session')))
    # One turn only.
    b.set_window_size(1280, 800)
    select.Select(b.find_element(By.ID, 'turn')).select_by_value('1')
    b.find_element(By.ID, 'apply').click()
    ui.WebDriverWait(b, 60).until(lambda d: len(d.find_elements(
        By.CSS_SELECTOR, '#side-1 .turn')) == 1)
    self.assertEqual(b.find_element(By.CSS_SELECTOR, '#side-1 .turn')
                     .get_attribute('data-turn'), '1')


if __name__ == '__main__':
  absltest.main()
