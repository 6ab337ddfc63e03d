"""The README's test command is the one CI runs."""

import json
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

  def test_ci_then_runs_the_new_versions_check(self):
    ci_lines = (ROOT / '.ci' / 'run').read_text().splitlines()
    readme_at = next(i for i, line in enumerate(ci_lines) if 'pytest' in line)
    self.assertIn('bash .ci/new_versions', ci_lines[readme_at + 1:])
    check = (ROOT / '.ci' / 'new_versions').read_text()
    self.assertIn('-m fast', check)
    self.assertNotIn('constraints.txt', check)  # the newest versions

  def test_the_quickstart_timing_names_the_profiles_largest_parts(self):
    rows = re.findall(r'^\| ([a-z][^|]*?) \| ([0-9.]+) \| ([0-9.]+)% \|',
                      (ROOT / 'results' / 'quickstart_profile.md').read_text(),
                      flags=re.M)
    shares = sorted(((float(share), part) for part, _, share in rows),
                    reverse=True)
    readme = (ROOT / 'README.md').read_text()
    start = readme.index('The main job: 300 sessions')
    sentence = ' '.join(readme[start:readme.index('```', start)].split())
    self.assertIn('results/quickstart_profile.md', sentence)
    share, largest = shares[0]
    self.assertIn(largest, sentence)  # "half of it text encoding"
    self.assertBetween(share, 40.0, 60.0)
    self.assertBetween(shares[1][0] + shares[2][0], 15.0, 35.0)
    self.assertCountEqual([shares[1][1], shares[2][1]],
                          ['captioning', 'video encoding'])

  def test_the_fidelity_tables_are_the_results(self):
    """The README's fidelity summary and its rows that change verdict are
    results/fidelity.json's, member by member in the same order."""
    readme = (ROOT / 'README.md').read_text()
    results = json.loads((ROOT / 'results' / 'fidelity.json').read_text())
    members = list(results['summary'])
    summary = re.search(r'\| family member \|.*?\n\n', readme, re.S).group(0)
    rows = [line.split('|')[2:6] for line in summary.splitlines()[2:]
            if line.startswith('|')]
    self.assertEqual(
        [[int(x) for x in row] for row in rows],
        [[results['summary'][m][v] for v in ('reproduced', 'contradicted',
                                             'inconclusive', 'untestable')]
         for m in members])
    verdicts = {}
    for m in members:
      for row in results['rows'][m]:
        if row.get('placement'):  # the other placement: apart, not counted
          continue
        label = row['key'] + (f" ({row['reading']})" if row['reading']
                              else '')
        verdicts.setdefault(label, []).append(row['verdict'])
    changed = {k: v for k, v in verdicts.items() if len(set(v)) > 1}
    table = re.search(r'<details>.*?\n\n(\|.*?)\n\n</details>', readme,
                      re.S).group(1).splitlines()[2:]
    shown = {line.split(' | ')[0].strip('| '): [
        c.strip(' |') for c in line.split(' | ')[1:]] for line in table}
    self.assertEqual(shown, changed)
    self.assertIn(f'{len(changed)} claims change verdict across the family',
                  readme)


def run_example(test, marker: str, page: str = 'README.md') -> dict:
  """Runs the one Python example of ``page`` (the README, or a doc) that
  mentions ``marker``."""
  readme = (ROOT / page).read_text()
  examples = [b for b in re.findall(r'```python\n(.*?)```', readme, flags=re.S)
              if marker in b]
  test.assertLen(examples, 1)
  scope = {}
  exec(examples[0], scope)  # pylint: disable=exec-used
  return scope


class ReadmeExampleTest(absltest.TestCase):

  def test_python_example_runs(self):
    scope = run_example(self, 'shown_ids', 'docs/layout.md')
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
