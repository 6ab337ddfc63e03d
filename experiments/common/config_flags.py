"""absl flags derived from a config tree (``recovr_jax.config_tree``).

``define(ConfigType)`` defines one flag per setting of the tree: its name,
type, default, choices and help all come from the field. A flag is defined
once however many entry points ask for it (the trainers define the world's,
the run the whole tree). ``values`` reads them back for
``config_tree.kwargs``; ``help_groups`` lists them under their groups.
"""

from absl import flags

from recovr_jax import config_tree

_DEFINED = {}  # (flag values' id, flag name) -> its Leaf, defined here


class _ChoiceParser(flags.ArgumentParser):
  """A value of ``kind`` that must be one of ``choices`` (an enum of numbers,
  which absl's ``EnumParser`` does not parse)."""

  def __init__(self, kind, choices):
    super().__init__()
    self.kind, self.choices = kind, tuple(choices)

  def parse(self, argument):
    value = self.kind(argument)
    if value not in self.choices:
      raise ValueError(f'value should be one of '
                       f'<{"|".join(map(str, self.choices))}>')
    return value

  def flag_type(self):
    return f'{self.kind.__name__} enum'


def _define(leaf: config_tree.Leaf, flag_values, module: str) -> None:
  name, default, help_text = leaf.name, leaf.default, leaf.help
  choices = leaf.choices
  if leaf.kind is tuple:
    if choices:
      help_text += f' Valid: {", ".join(choices)}.'
    flags.DEFINE_list(name, list(default), help_text, flag_values=flag_values,
                      module_name=module)
  elif leaf.kind is str and choices:
    flags.DEFINE_enum(name, default, list(choices), help_text,
                      flag_values=flag_values, module_name=module)
  elif choices:
    flags.DEFINE(_ChoiceParser(leaf.kind, choices), name, default, help_text,
                 serializer=flags.ArgumentSerializer(),
                 flag_values=flag_values, module_name=module)
  elif leaf.kind is bool:
    flags.DEFINE_bool(name, default, help_text, flag_values=flag_values,
                      module_name=module)
  else:
    define = {int: flags.DEFINE_integer, float: flags.DEFINE_float,
              str: flags.DEFINE_string}[leaf.kind]
    extra = ({'lower_bound': leaf.setting.lower_bound}
             if leaf.setting.lower_bound is not None else {})
    define(name, default, help_text, flag_values=flag_values,
           module_name=module, **extra)


def define(config_type, module: str, only=None,
           flag_values=flags.FLAGS) -> list[config_tree.Leaf]:
  """Defines the flags of ``config_type``'s tree (``only``: those named)
  not defined yet, as key flags of ``module`` (the defining module's
  ``__name__``: ``--helpshort`` and ``adopt_module_key_flags`` find them
  there); returns their leaves. A flag two configs share
  (``--start`` of both sources) must agree in type, default and choices."""
  leaves = [leaf for leaf in config_tree.leaves(config_type)
            if only is None or leaf.name in only]
  for leaf in leaves:
    key = (id(flag_values), leaf.name)
    known = _DEFINED.get(key)
    if known is None:
      _define(leaf, flag_values, module)
      _DEFINED[key] = leaf
    elif (known.kind, known.default, known.choices) != (
        leaf.kind, leaf.default, leaf.choices):
      raise TypeError(f'--{leaf.name} is declared twice differently: '
                      f'{known.dotted} and {leaf.dotted}')
  return leaves


def values(leaves, flag_values=flags.FLAGS) -> dict:
  """Flag name -> value, of ``leaves``."""
  return {leaf.name: flag_values[leaf.name].value for leaf in leaves}


def given(name: str, flag_values=flags.FLAGS) -> bool:
  return not flag_values[name].using_default_value


def help_groups(leaves, extra=()) -> tuple:
  """``[(title, [flag names])]`` of ``leaves`` by their group, in order of
  first appearance; ``extra``: further ``(title, [names])`` merged in."""
  groups, seen = {}, set()
  for leaf in leaves:  # a flag two configs share: in the first one's group
    if leaf.name not in seen:
      groups.setdefault(leaf.group, []).append(leaf.name)
      seen.add(leaf.name)
  for title, names in extra:
    groups.setdefault(title, [])
    groups[title] = [n for n in names if n not in groups[title]] + groups[title]
  return tuple(groups.items())
