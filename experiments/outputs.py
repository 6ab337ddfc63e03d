"""Writing measured results, shared by the experiment entry points."""

import json
import os


def write_json(path: str, obj) -> None:
  """Writes ``obj`` as indented JSON to ``path`` (parents created)."""
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with open(path, 'w') as f:
    json.dump(obj, f, indent=2)
  print(f'wrote {path}')
