"""Package-level layering: dependencies point one way (docs/layout.md).

core <- reasoning <- protocol <- methods <- drivers and the environments
(envs.world, envs.files) <- run and analysis <- experiments/. Inside
envs.world the benchmark, the simulated user, the trained models and the
JAX face are apart: benchmark <- user <- models <- face, and the source and
environment modules at envs/world/ sit above them. Root modules
(config_tree, checksums, paths, ...) may be imported from anywhere; no two
units import each other, directly or through others.
"""

import ast
import pathlib

from absl.testing import absltest

ROOT = pathlib.Path(__file__).resolve().parent.parent / 'recovr_jax'
_BELOW_ENVS = {'core', 'reasoning', 'protocol', 'methods'}
_WORLD = ('envs.world.benchmark', 'envs.world.user', 'envs.world.models',
          'envs.world.face')
# What each lower unit may import besides itself and root modules.
ALLOWED = {
    'core': set(),
    'reasoning': {'core'},
    'protocol': {'core', 'reasoning'},
    'methods': {'core', 'protocol', 'reasoning'},
    'drivers': _BELOW_ENVS,
    'envs.world.benchmark': {'core', 'reasoning'},
    'envs.world.user': {'core', 'reasoning', 'protocol',
                        'envs.world.benchmark'},
    'envs.world.models': _BELOW_ENVS | set(_WORLD[:2]),
    'envs.world.face': _BELOW_ENVS | set(_WORLD[:3]),
    'envs.world': _BELOW_ENVS | set(_WORLD),
    'envs.files': _BELOW_ENVS,
}
NEVER = {'run', 'analysis', 'study'}  # above every environment


def unit(parts, root=ROOT) -> str:
  """The layering unit of a module path below the package (``parts``
  without the file name): a top subpackage, ``envs.<env>``, or a
  subpackage of ``envs.world``."""
  if parts[0] != 'envs' or len(parts) < 2:
    return parts[0]
  if len(parts) > 2 and (root / 'envs' / parts[1] / parts[2]).is_dir():
    return '.'.join(parts[:3])
  return '.'.join(parts[:2])


def package_imports(root=ROOT) -> dict:
  """(importing unit, imported unit) -> 'file:line' of the first import,
  over every module of package ``root`` (function-level imports
  included)."""
  edges, package = {}, root.name
  for path in sorted(root.rglob('*.py')):
    rel = path.relative_to(root).parts
    if len(rel) < 2:
      continue  # a root module
    src = unit(rel[:-1], root)
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
        if parts[0] == package and len(parts) > 1 and (root / parts[1]).is_dir():
          inner = [p for p in parts[1:]]
          depth = len(inner)
          while depth and not (root.joinpath(*inner[:depth])).is_dir():
            depth -= 1  # the package that holds the imported module
          dst = unit(inner[:max(depth, 1)], root)
          if dst != src:
            edges.setdefault((src, dst), where)
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
        'core': 'from pkg.run import x\n',  # a fault
        'protocol': 'def f():\n  from pkg.envs.files import y\n',  # a cycle
        'envs/files': 'import pkg.protocol.z\n',
        'envs/world/benchmark': 'from pkg.envs.world.face import w\n',
        'envs/world/face': '',
        'run': ''}.items():
      (root / sub).mkdir(parents=True)
      (root / sub / 'm.py').write_text(body)
    edges = package_imports(root)
    self.assertEqual(faults(edges), [
        'core -> run (pkg/core/m.py:1)',
        'envs.world.benchmark -> envs.world.face '
        '(pkg/envs/world/benchmark/m.py:1)',
        'protocol -> envs.files (pkg/protocol/m.py:2)'])
    self.assertEqual(cycles(edges), [('envs.files', 'protocol')])


class NamesTest(absltest.TestCase):

  def test_no_two_library_modules_share_a_base_name(self):
    stems = {}
    for path in sorted(ROOT.rglob('*.py')):
      if path.name != '__init__.py':
        stems.setdefault(path.stem, []).append(
            str(path.relative_to(ROOT.parent)))
    self.assertEqual({k: v for k, v in stems.items() if len(v) > 1}, {})

  def test_the_top_of_experiments_holds_at_most_eight_files(self):
    top = sorted(p.name for p in (ROOT.parent / 'experiments').iterdir()
                 if p.is_file())
    self.assertLessEqual(len(top), 8, top)

  def test_tests_mirror_the_package(self):
    # Every test folder but experiments/ and helpers/ (what tests share)
    # is a package of recovr_jax.
    tests = ROOT.parent / 'tests'
    for folder in sorted(p for p in tests.rglob('*') if p.is_dir()
                         and '__pycache__' not in p.parts
                         and p.name != 'data'):
      rel = folder.relative_to(tests)
      if rel.parts[0] in ('experiments', 'helpers'):
        continue
      self.assertTrue((ROOT / rel).is_dir(), f'tests/{rel} mirrors nothing')


def aliased_imports(root=ROOT.parent) -> list[str]:
  """Project modules imported under another name where no second module
  of their name is imported in the same file (a true collision), a line
  each: ``file:line module as alias``."""
  tops = ('recovr_jax', 'experiments', 'tests', 'third_party')

  def is_module(dotted):
    path = root.joinpath(*dotted.split('.'))
    return path.with_suffix('.py').is_file() or (
        path / '__init__.py').is_file()
  out = []
  for top in tops:
    for path in sorted((root / top).rglob('*.py')):
      tree = ast.parse(path.read_text(encoding='utf-8'))
      names, aliased = [], []
      for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
          for a in node.names:
            names.append(a.name)
            full = f'{node.module}.{a.name}'
            if (a.asname and a.asname != a.name and
                full.split('.')[0] in tops and is_module(full)):
              aliased.append((node.lineno, full, a.asname))
        elif isinstance(node, ast.Import):
          for a in node.names:
            names.append(a.name.split('.')[-1])
            if (a.asname and a.name.split('.')[0] in tops and
                a.asname != a.name.split('.')[-1]):
              aliased.append((node.lineno, a.name, a.asname))
      for line, full, alias in aliased:
        if names.count(full.split('.')[-1]) < 2:
          out.append(f'{path.relative_to(root)}:{line} {full} as {alias}')
  return out


class ImportNamesTest(absltest.TestCase):
  """A module goes by its own name (an alias only where two modules of one
  name meet in a file), and no data source asks for the reasoner."""

  def test_no_project_module_is_imported_under_another_name(self):
    self.assertEqual(aliased_imports(), [])

  def test_an_alias_without_a_collision_is_seen(self):
    root = pathlib.Path(self.create_tempdir().full_path)
    (root / 'recovr_jax' / 'run').mkdir(parents=True)
    (root / 'recovr_jax' / 'run' / 'config.py').write_text('')
    (root / 'recovr_jax' / 'study').mkdir()
    (root / 'recovr_jax' / 'study' / 'app.py').write_text('')
    (root / 'recovr_jax' / 'm.py').write_text(
        'from absl import app\n'
        'from recovr_jax.study import app as app_lib\n'  # a collision
        'def f():\n  from recovr_jax.run import config as config_lib\n')
    self.assertEqual(aliased_imports(root), [
        'recovr_jax/m.py:4 recovr_jax.run.config as config_lib'])

  def test_no_data_source_reads_the_reasoner(self):
    found = []
    for path in sorted((ROOT / 'envs').rglob('*.py')):
      for node in ast.walk(ast.parse(path.read_text(encoding='utf-8'))):
        where = f'{path.relative_to(ROOT.parent)}:{getattr(node, "lineno", 0)}'
        if isinstance(node, ast.ImportFrom) and node.module and any(
            f'{node.module}.{a.name}' == 'recovr_jax.reasoning.registry'
            for a in node.names):
          found.append(f'{where} imports the registry')
        if isinstance(node, ast.Attribute) and node.attr in (
            'reasoner', 'reasoner_config'):
          found.append(f'{where} reads .{node.attr}')
    self.assertEqual(found, [])


class ModuleSizeTest(absltest.TestCase):
  """A module docstring says what the module is, not why it has its size
  (docs/layout.md); no library module grows past ``MAX_LINES``."""

  MAX_LINES = 900

  def test_no_docstring_defends_its_size(self):
    defended = []
    for path in sorted(ROOT.rglob('*.py')):
      doc = ast.get_docstring(ast.parse(path.read_text(encoding='utf-8')))
      if doc and 'Why one module' in doc:
        defended.append(str(path.relative_to(ROOT.parent)))
    self.assertEmpty(defended, 'module docstrings that defend their size')

  def test_no_module_is_over_the_cap(self):
    long = [f'{p.relative_to(ROOT.parent)} ({n} lines)'
            for p in sorted(ROOT.rglob('*.py'))
            if (n := p.read_text(encoding='utf-8').count('\n'))
            > self.MAX_LINES]
    self.assertEmpty(long, f'modules over {self.MAX_LINES} lines')


if __name__ == '__main__':
  absltest.main()
