"""Configs as JAX pytrees: a config's traced fields are its leaves, and
every other field is static metadata.

A numeric field that no shape or branch depends on is *traced*:
``config_tree.setting(..., traced=True)`` for a flag, ``number(default)``
for a field that is not one, ``switch(default)`` for a bool the code reads
as a value (``jnp.where``: an ablation's switch), and
``choice(default, choices)`` for a name the code reads by value (a
fusion variant: ``core.fusion.fuse`` takes its name or its index). A config class with such fields, or
holding a config that has them, is declared ``@register``: its children
are its traced fields and its fields that hold a registered config, and
every other field is static (part of the tree's structure, so hashed and
compared, as ``jax.jit``'s static arguments are). ``jax.jit`` (and
``executables.jit``) of a function of a config therefore compiles once for
every value of its traced fields, and once per value of the rest. A choice
travels as its index in ``choices`` (None, no choice, is an empty subtree:
a branch).

JAX rebuilds a config from its leaves (tracers, under ``jit``) with its
``__init__``: a ``__post_init__`` that checks a traced field's value
checks it only when ``concrete(self)`` (the values it was made with were
checked when it was made).
"""

import dataclasses
import numbers

import jax

from recovr_jax import config_tree

_REGISTERED: set[type] = set()


def number(default):
  """A traced numeric field that is not a flag (a method form's copy of a
  setting, say)."""
  return dataclasses.field(default=default,
                           metadata={config_tree.TRACED_KEY: True})


def switch(default: bool):
  """A traced bool field that is not a flag: a switch the code reads as a
  value (``jnp.where``), not as a branch, so configs that differ only in it
  (a method and its ablations) share one compiled program."""
  return number(default)


def choice(default, choices: tuple[str, ...]):
  """A traced field holding one of ``choices`` or None: its index in
  ``choices`` travels, so configs that differ only in it share one compiled
  program (the code reads the name, or under ``jit`` the traced index).
  None stays static (a branch, not a value)."""
  return dataclasses.field(default=default,
                           metadata={config_tree.TRACED_KEY: tuple(choices)})


def concrete(config) -> bool:
  """Whether every traced field of ``config`` holds Python values (False
  in a config JAX rebuilt from tracers or placeholders)."""
  for field in dataclasses.fields(config):
    if field.metadata.get(config_tree.TRACED_KEY):
      value = getattr(config, field.name)
      for v in value if isinstance(value, tuple) else (value,):
        if not (v is None or isinstance(v, (numbers.Number, str))):
          return False
  return True


def register(cls: type) -> type:
  """Registers frozen config dataclass ``cls`` as a pytree (the module
  docstring); a class decorator."""
  fields = dataclasses.fields(cls)

  def flatten(config):
    names, children, static = [], [], []
    for field in fields:
      value = getattr(config, field.name)
      kind = field.metadata.get(config_tree.TRACED_KEY)
      if kind:
        if isinstance(kind, tuple) and isinstance(value, str):  # a choice
          if value not in kind:
            raise ValueError(f'{cls.__name__}.{field.name} must hold one of '
                             f'{kind} or None, got {value!r}')
          value = kind.index(value)
        names.append(field.name)
        children.append(value)
      elif type(value) in _REGISTERED:
        names.append(field.name)
        children.append(value)
      else:
        static.append((field.name, value))
    return children, (tuple(names), tuple(static))

  def unflatten(aux, children):
    names, static = aux
    return cls(**dict(static), **dict(zip(names, children)))

  jax.tree_util.register_pytree_node(cls, flatten, unflatten)
  _REGISTERED.add(cls)
  return cls
