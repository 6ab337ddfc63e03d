"""Writing measured results, shared by the experiment entry points."""

import json
import os
import pathlib

from absl import flags

# One definition: absl flag names are process-wide, and the tests import
# several entry points into one process.
OUTPUT_MD = flags.DEFINE_string('output_md', None,
                                'Also write the table (markdown) here.')


def write_json(path: str, obj) -> None:
  """Writes ``obj`` as indented JSON to ``path`` (parents created)."""
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with open(path, 'w') as f:
    json.dump(obj, f, indent=2)
  print(f'wrote {path}')


def write_markdown(table: str) -> None:
  """Prints ``table`` and writes it to ``--output_md`` when given."""
  print(table)
  if OUTPUT_MD.value:
    pathlib.Path(OUTPUT_MD.value).write_text(table)
    print(f'wrote {OUTPUT_MD.value}')
