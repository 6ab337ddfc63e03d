"""A setting written once: the field of its config dataclass.

Each setting a user can set is one field of the run's config tree
(``run.run_config.RunConfig`` and the sub-configs it holds), declared
with ``setting(...)``. The field carries everything about it:

* its type and default (the dataclass field's own);
* its help, in ``#:`` comments on the lines above it (Sphinx's convention
  for attribute documentation, so the API docs and ``--help`` say the same);
* its flag name (``flag=``; the field's name when omitted), the choices, a
  lower bound, whether a sweep may vary it (``sweep=True``), whether a
  preset decides it when the command line does not (``preset=True``), and
  its ``--help`` group.

``leaves`` walks the tree and returns one ``Leaf`` per flag; the command
line (``experiments/common/config_flags.py``) defines the flags from them, the
sweeps read ``sweepable`` and ``replace``.

A numeric field that no shape or branch depends on is declared *traced*
(``setting(..., traced=True)``): ``config_pytree`` makes it a leaf of its
config's pytree, so a jitted function of the config compiles once for every
value of it. Nothing here imports absl, JAX or the rest of the package:
every layer may declare its settings.
"""

import ast
import dataclasses
import inspect
import textwrap
import types
import typing

KEY = 'recovr_jax.setting'
TRACED_KEY = 'recovr_jax.traced'
UNSET = type('Unset', (), {'__repr__': lambda self: 'UNSET'})()  # no value


@dataclasses.dataclass(frozen=True)
class Setting:
  """What a field adds to be a flag (see the module docstring)."""
  flag: str | None = None
  choices: object = None        # a tuple, or a callable returning one
  sweep: bool = False
  preset: bool = False          # the flag's default None: a preset's value
  lower_bound: int | None = None
  flag_default: object = UNSET  # the flag's, when not the field's
  elements: tuple[str, ...] = ()  # a tuple field set by one flag per element
  element_help: tuple[str, ...] = ()
  variants: tuple[type, ...] = ()  # a field holding one of these configs
  group: str | None = None
  only_for: str | None = None  # the data variant (NAME) it applies to


def setting(default=dataclasses.MISSING, *, traced: bool = False,
            **options):
  """A dataclass field that is a setting; ``options``: ``Setting``'s.
  ``traced``: a number (or tuple of numbers) that ``jit`` traces."""
  metadata = {KEY: Setting(**options)}
  if traced:
    metadata[TRACED_KEY] = True
  return dataclasses.field(default=default, metadata=metadata)


@dataclasses.dataclass(frozen=True)
class Leaf:
  """One flag of the tree."""
  name: str                  # the flag (today's name)
  path: tuple[str, ...]      # the field path from the root
  owner: type                # the dataclass that declares the field
  kind: type                 # int, float, str, bool or tuple (a list flag)
  default: object            # the flag's default
  help: str
  setting: Setting
  index: int | None = None   # the element of a tuple field
  variant: str | None = None  # the config variant's NAME (``variants``)

  @property
  def choices(self) -> tuple | None:
    c = self.setting.choices
    return tuple(c() if callable(c) else c) if c is not None else None

  @property
  def group(self) -> str | None:
    """Its ``--help`` group: its own, else its config's ``HELP_GROUP``."""
    return self.setting.group or getattr(self.owner, 'HELP_GROUP', None)

  @property
  def dotted(self) -> str:
    """The field path, e.g. ``loop.rrf_k`` (``loop.kappa.1`` for an
    element)."""
    parts = self.path + ((str(self.index),) if self.index is not None else ())
    return '.'.join(parts)


def setting_of(field: dataclasses.Field) -> Setting | None:
  return field.metadata.get(KEY)


def comments(cls: type) -> dict[str, str]:
  """Field name -> the ``#:`` comment lines above it, joined (the help), in
  ``cls`` and the config classes it derives from."""
  out = {}
  for owner in reversed(cls.__mro__):
    if not dataclasses.is_dataclass(owner):
      continue
    lines = textwrap.dedent(inspect.getsource(owner)).splitlines()
    for node in ast.parse('\n'.join(lines)).body[0].body:
      if not isinstance(node, ast.AnnAssign):
        continue
      block, row = [], node.lineno - 2
      while row >= 0 and lines[row].strip().startswith('#:'):
        block.insert(0, lines[row].strip()[2:].strip())
        row -= 1
      if block:
        out[node.target.id] = ' '.join(block)
  return out


def _kind(hint) -> type:
  """The flag's value type of a field's type hint."""
  args = [a for a in typing.get_args(hint) if a is not type(None)]
  origin = typing.get_origin(hint)
  if origin in (typing.Union, types.UnionType):
    return _kind(args[0])
  if origin is tuple or hint is tuple:
    return tuple
  if hint in (int, float, str, bool):
    return hint
  raise TypeError(f'a setting of type {hint!r} has no flag type')


def leaves(cls: type, prefix: tuple[str, ...] = (),
           variant: str | None = None) -> list[Leaf]:
  """Every flag of config dataclass ``cls``, depth first in field order."""
  hints = typing.get_type_hints(cls)
  helps = comments(cls)
  out = []
  for field in dataclasses.fields(cls):
    path = prefix + (field.name,)
    option = setting_of(field)
    if option is None:
      if dataclasses.is_dataclass(hints[field.name]):
        out.extend(leaves(hints[field.name], path, variant))
      continue
    help_text = helps.get(field.name)
    if not help_text:
      raise TypeError(f'{cls.__name__}.{field.name} is a setting without a '
                      '"#:" help comment above it')
    if option.variants:  # the flag that picks one, then each one's
      default = option.flag_default
      if default is UNSET:
        default = field.default.NAME
      out.append(Leaf(option.flag or field.name, path, cls, str, default,
                      help_text, option, variant=variant))
      seen = {}  # a field a variant inherits from another: one flag
      for sub in option.variants:
        for leaf in leaves(sub, path, sub.NAME):
          base = seen.setdefault((leaf.name, leaf.dotted), sub)
          if base is sub or not issubclass(sub, base):
            out.append(leaf)
      continue
    default = (option.flag_default
               if option.flag_default is not UNSET
               else None if option.preset else field.default)
    if option.elements:
      element_type = typing.get_args(hints[field.name])[0]
      for i, name in enumerate(option.elements):
        out.append(Leaf(name, path, cls, element_type, default[i],
                        option.element_help[i],
                        option, index=i, variant=variant))
      continue
    out.append(Leaf(option.flag or field.name, path, cls,
                    _kind(hints[field.name]), default, help_text, option,
                    variant=option.only_for or variant))
  return out


def sweepable(cls: type) -> dict[str, Leaf]:
  """Flag name -> leaf, of the settings a sweep may vary."""
  return {leaf.name: leaf for leaf in leaves(cls) if leaf.setting.sweep}


def kwargs(cls: type, values, nested: bool = True) -> dict:
  """The constructor arguments of ``cls`` from ``values`` (flag name ->
  value): every setting of ``cls`` named there, and (``nested``) its
  sub-configs built the same way; a preset setting's ``None`` is left out
  (the caller's preset decides it), and so is a field holding variants
  (the caller picks one)."""
  hints = typing.get_type_hints(cls)
  out = {}
  by_name = {(leaf.path[-1], leaf.index): leaf
             for leaf in leaves(cls) if leaf.owner is cls
             and len(leaf.path) == 1}
  for field in dataclasses.fields(cls):
    option = setting_of(field)
    if option is None:
      if nested and dataclasses.is_dataclass(hints[field.name]):
        out[field.name] = hints[field.name](
            **kwargs(hints[field.name], values))
      continue
    if option.variants:
      continue  # the caller picks the variant
    if option.elements:
      names = [by_name[(field.name, i)].name
               for i in range(len(option.elements))]
      if all(n in values for n in names):
        out[field.name] = tuple(values[n] for n in names)
      continue
    name = option.flag or field.name
    if name not in values or (option.preset and values[name] is None):
      continue
    value = values[name]
    out[field.name] = tuple(value) if isinstance(value, list) else value
  return out


def replace(config, leaf: Leaf, value):
  """A copy of ``config`` (the tree's root) with ``leaf`` set to ``value``
  (already of the leaf's type); the sub-configs validate it."""

  def put(node, path):
    if len(path) == 1:
      new = value
      if leaf.index is not None:
        new = list(getattr(node, path[0]))
        new[leaf.index] = value
        new = tuple(new)
      return dataclasses.replace(node, **{path[0]: new})
    return dataclasses.replace(
        node, **{path[0]: put(getattr(node, path[0]), path[1:])})

  return put(config, leaf.path)
