"""The README's test command is the one CI runs."""

import pathlib
import re

from absl.testing import absltest

ROOT = pathlib.Path(__file__).resolve().parents[1]


class ReadmeTest(absltest.TestCase):

  def test_ci_runs_the_readme_test_command(self):
    ci_lines = (ROOT / '.ci' / 'run').read_text().splitlines()
    command = next(line for line in ci_lines if 'pytest' in line)
    readme = (ROOT / 'README.md').read_text()
    blocks = re.findall(r'```(?:bash|sh)?\n(.*?)```', readme, flags=re.S)
    commands = [line.strip() for b in blocks for line in b.splitlines()]
    self.assertIn(command, commands)


def run_example(test, marker: str) -> dict:
  """Runs the README's one Python example that mentions ``marker``."""
  readme = (ROOT / 'README.md').read_text()
  examples = [b for b in re.findall(r'```python\n(.*?)```', readme, flags=re.S)
              if marker in b]
  test.assertLen(examples, 1)
  scope = {}
  exec(examples[0], scope)  # pylint: disable=exec-used
  return scope


class ReadmeExampleTest(absltest.TestCase):

  def test_python_example_runs(self):
    scope = run_example(self, 'shown_ids')
    shown = scope['shown_ids']
    self.assertEqual(shown.shape, (4, 100))
    for row in shown.tolist():  # full lists of distinct gallery ids
      self.assertLen(set(row), 100)
      self.assertGreaterEqual(min(row), 0)


class ReadmeAddingAMethodTest(absltest.TestCase):

  def test_toy_baseline_example_registers(self):
    from recovr_jax import methods  # pylint: disable=g-import-not-at-top
    run_example(self, 'ToyBaseline')
    try:
      self.assertEqual(methods.make('toy').name, 'toy')
      self.assertIn('toy', methods.BASELINES)
    finally:
      methods.unregister('toy')


if __name__ == '__main__':
  absltest.main()
