"""Package-level layering: dependencies point one way (docs/layout.md).

core <- protocol <- methods <- drivers, the data sources (world, real) <-
experiment <- experiments/; reasoning sits beside protocol (both read only
core). Root
modules (checksums, profiling, ...) may be imported from anywhere; no two
subpackages import each other, directly or through others.
"""

import ast
import pathlib

from absl.testing import absltest

ROOT = pathlib.Path(__file__).resolve().parent.parent / 'recovr_jax'
# What each lower subpackage may import besides itself and root modules.
ALLOWED = {
    'core': set(),
    'reasoning': {'core'},
    'protocol': {'core', 'reasoning'},
    'methods': {'core', 'protocol', 'reasoning'},
    'drivers': {'core', 'protocol', 'reasoning', 'methods'},
    'world': {'core', 'protocol', 'reasoning', 'methods'},
    'real': {'core', 'protocol', 'reasoning', 'methods', 'world'},
}
NEVER = {'experiment', 'study'}  # above every data source


def package_imports(root=ROOT) -> dict:
  """(importing subpackage, imported subpackage) -> 'file:line' of the
  first import, over every module of package ``root`` (function-level
  imports included)."""
  edges, package = {}, root.name
  for path in sorted(root.rglob('*.py')):
    rel = path.relative_to(root).parts
    if len(rel) < 2:
      continue  # a root module
    src = rel[0]
    for node in ast.walk(ast.parse(path.read_text(encoding='utf-8'))):
      if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
      elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
        names = [f'{node.module}.{a.name}' for a in node.names]
      else:
        continue
      for imported in names:
        parts = imported.split('.')
        where = f'{path.relative_to(root.parent)}:{node.lineno}'
        if (parts[0] == package and len(parts) > 1
            and (root / parts[1]).is_dir() and parts[1] != src):
          edges.setdefault((src, parts[1]), where)
        if parts[0] == 'experiments':
          edges.setdefault((src, 'experiments/'), where)
  return edges


def faults(edges: dict) -> list[str]:
  """Imports against the layering, a line each."""
  return [f'{src} -> {dst} ({where})'
          for (src, dst), where in sorted(edges.items())
          if (src in ALLOWED and dst not in ALLOWED[src])
          or dst == 'experiments/' or (dst in NEVER and src in ALLOWED)]


def cycles(edges: dict) -> list[tuple[str, str]]:
  """Pairs of subpackages that reach each other."""
  graph = {}
  for src, dst in edges:
    graph.setdefault(src, set()).add(dst)

  def reaches(a, b, seen):
    return any(n == b or (n not in seen and reaches(n, b, seen | {n}))
               for n in graph.get(a, ()))

  return sorted({tuple(sorted((a, b))) for a, b in edges
                 if reaches(b, a, {b})})


class LayeringTest(absltest.TestCase):

  def test_lower_layers_import_only_what_is_below_them(self):
    edges = package_imports()
    self.assertIn(('protocol', 'core'), edges)  # it reads the real tree
    self.assertEqual(faults(edges), [])

  def test_no_cycles_between_subpackages(self):
    self.assertEqual(cycles(package_imports()), [])

  def test_the_checks_see_a_fault_and_a_cycle(self):
    root = pathlib.Path(self.create_tempdir().full_path) / 'pkg'
    for sub, body in {
        'core': 'from pkg.experiment import x\n',  # a fault
        'protocol': 'def f():\n  from pkg.world import y\n',  # a cycle
        'world': 'import pkg.protocol.z\n',
        'experiment': ''}.items():
      (root / sub).mkdir(parents=True)
      (root / sub / 'm.py').write_text(body)
    edges = package_imports(root)
    self.assertEqual(faults(edges), [
        'core -> experiment (pkg/core/m.py:1)',
        'protocol -> world (pkg/protocol/m.py:2)'])
    self.assertEqual(cycles(edges), [('protocol', 'world')])


class ModuleSizeTest(absltest.TestCase):
  """A library module of more than ``MAX_LINES`` lines says in its
  docstring why it is one module ("Why one module ...")."""

  MAX_LINES = 400

  def test_long_modules_say_why(self):
    silent = []
    for path in sorted(ROOT.rglob('*.py')):
      text = path.read_text(encoding='utf-8')
      if text.count('\n') <= self.MAX_LINES:
        continue
      doc = ast.get_docstring(ast.parse(text)) or ''
      if 'Why one module' not in doc:
        silent.append(f'{path.relative_to(ROOT.parent)} '
                      f'({text.count(chr(10))} lines)')
    self.assertEmpty(silent, 'modules over 400 lines whose docstring does '
                     'not say why they are one module')


if __name__ == '__main__':
  absltest.main()
