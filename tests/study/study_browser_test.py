"""The study in a real browser: headless Chromium through the whole flow
(instructions and consent, the practice instance, the instances, the
debrief), with the layout checked and screenshotted at 1280x800 and 390 px
(``STUDY_SCREENSHOT_DIR=<dir>`` keeps them).

Needs Debian's ``chromium`` and ``chromium-driver`` (``.ci/run`` installs
them and sets ``RECOVR_REQUIRE_BROWSER=1``, under which a missing browser
fails instead of skipping). ``STUDY_SCREENSHOT=<path.png>`` keeps the
screenshot.
"""

import os
import pathlib
import tempfile

from absl.testing import absltest

from recovr_jax.study import app
from tests.helpers import browser
from tests.study import study_test


class BrowserTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    browser.require(self)   # before the study is built
    self.study, _ = study_test.Tiny.study('browser', participant_flow=True)
    from recovr_jax.study import media  # pylint: disable=g-import-not-at-top
    built = study_test.Tiny.built
    gallery_media = media.Media(len(built.env.gallery),
                            built.source.frames(built), 160)
    self.browser, self.port = browser.serve(
        self, app.make_app(self.study, gallery_media))

  def test_one_instance_in_chromium(self):
    from selenium.webdriver.common.by import By  # pylint: disable=g-import-not-at-top
    from selenium.webdriver.common.keys import Keys  # pylint: disable=g-import-not-at-top
    from selenium.webdriver.support import ui  # pylint: disable=g-import-not-at-top
    b = self.browser

    def wait_for(text):  # a click returns before the next page loads
      ui.WebDriverWait(b, 60).until(lambda d: text in d.page_source)
    b.get(f'http://127.0.0.1:{self.port}/')
    b.find_element(By.ID, 'participant').send_keys('cy')
    b.find_element(By.ID, 'code').send_keys(self.study.code('cy'))
    b.find_element(By.ID, 'signin').click()
    wait_for('id="consent-text"')   # instructions and consent first
    self.assertIn('practice', b.find_element(By.ID, 'instructions').text)
    b.find_element(By.ID, 'agree').click()
    wait_for('Practice video (not counted)')
    images = b.find_elements(By.CSS_SELECTOR, 'img.video')
    self.assertLen(images, 3)   # reference, top result, target
    for img in images:  # each animation arrived and decoded
      self.assertGreater(b.execute_script(
          'return arguments[0].naturalWidth', img), 0)
      alt = img.get_attribute('alt')
      self.assertIn(alt, ('Current top result', 'Target video (your goal)',
                          'Reference video'))
    visible = ('const r = document.querySelector(arguments[0])'
               '.getBoundingClientRect(); return r.top >= 0 && r.bottom <= '
               'window.innerHeight && r.right <= window.innerWidth;')
    no_sideways = ('return document.documentElement.scrollWidth <= '
                   'window.innerWidth;')
    shots = pathlib.Path(os.environ.get('STUDY_SCREENSHOT_DIR') or
                         tempfile.mkdtemp())
    shots.mkdir(parents=True, exist_ok=True)
    for width, height in ((1280, 800), (390, 844)):
      b.set_window_size(width, height)
      b.execute_script('window.scrollTo(0, 0)')
      # Above the fold: the current result, the target and the words that
      # started the search.
      for part in ('#current img', '#goal img', '#modification'):
        self.assertTrue(b.execute_script(visible, part), (width, part))
      self.assertTrue(b.execute_script(no_sideways), width)
      shot = shots / f'study_{width}.png'
      self.assertTrue(b.save_screenshot(str(shot)))
      self.assertEqual(shot.read_bytes()[:4], b'\x89PNG')
      self.assertEqual(browser.png_width(shot), b.execute_script(
          'return window.innerWidth') * b.execute_script(
              'return window.devicePixelRatio'), width)
    b.set_window_size(1280, 800)
    self.assertEqual(b.find_element(By.CSS_SELECTOR, 'label[for=feedback]')
                     .tag_name, 'label')
    # Keyboard only: type, then submit the form with Enter on the button.
    words = ['make them red', 'no. I want circles', 'bigger please']
    for t, text in enumerate(words, 1):
      box = b.find_element(By.ID, 'feedback')
      box.send_keys(text)
      b.find_element(By.ID, 'send').send_keys(Keys.ENTER)
      wait_for('last look' if t == 3 else f'feedback {t + 1} of 3')
    # The last look asks nothing (no feedback could answer it).
    self.assertEmpty(b.find_elements(By.ID, 'question'))
    self.assertEmpty(b.find_elements(By.ID, 'feedback'))
    history = b.find_element(By.ID, 'history').text
    for text in words:
      self.assertIn(text, history)
    shot = os.environ.get('STUDY_SCREENSHOT') or str(
        pathlib.Path(tempfile.mkdtemp()) / 'study.png')
    self.assertTrue(b.save_screenshot(shot))
    self.assertEqual(pathlib.Path(shot).read_bytes()[:4], b'\x89PNG')
    b.find_element(By.ID, 'not-found').click()
    for k in (1, 2):   # the counted instances
      wait_for(f'Instance {k} of 2')
      b.find_element(By.ID, 'found').click()
      # "Found it" is asked once more; going back keeps the search open.
      wait_for('id="confirm-found"')
      if k == 1:
        b.find_element(By.ID, 'cancel-found').click()
        wait_for(f'Instance {k} of 2')
        self.assertEmpty(b.find_elements(By.ID, 'confirm-found'))
        b.find_element(By.ID, 'found').click()
        wait_for('id="confirm-found"')
      b.find_element(By.ID, 'confirm-found').click()
    wait_for('id="debrief"')
    self.assertEqual(b.find_element(By.ID, 'completion-code').text,
                     self.study.completion_code('cy'))
    self.assertIn('withdrawn', b.find_element(By.ID, 'contact').text)
    # No video id anywhere the participant was.
    ids = self.study.env.video_ids
    events = study_test._log(self.study, 'cy')  # pylint: disable=protected-access
    self.assertEqual([e['event'] for e in events],
                     ['header', 'consent'] + ['turn'] * 4 +
                     ['end', 'turn', 'end', 'turn', 'end'])
    for e in events:
      if e['event'] == 'turn':
        for video in (e['reference'], e['target']):
          self.assertNotIn(ids[video], b.page_source)
    # The administration table at a phone's width: one block per row.
    b.get(f'http://127.0.0.1:{self.port}/admin/join?token='
          f'{self.study.admin_token()}')
    wait_for('id="participants"')
    b.set_window_size(390, 844)
    self.assertTrue(b.execute_script(no_sideways))
    cell = b.find_element(By.CSS_SELECTOR, '#participants td')
    self.assertEqual(cell.value_of_css_property('display'), 'block')
    self.assertEqual(b.execute_script(
        "return getComputedStyle(arguments[0], '::before').content", cell),
                     '"Participant: "')
    self.assertIn('cy agreed done 2 of 2', b.find_element(
        By.ID, 'participants').text)
    shot = shots / 'admin_390.png'
    self.assertTrue(b.save_screenshot(str(shot)))
    self.assertEqual(shot.read_bytes()[:4], b'\x89PNG')


if __name__ == '__main__':
  absltest.main()
