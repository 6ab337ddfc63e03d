r"""How much of the simulated user's clean feedback the rules reasoner reads.

    python -m experiments.evaluate.eval_user --output_json=results/user_language.json

For each user style (template, paper) and language (lexicon, own), samples
--num_turns feedback turns on random (target, shown) pairs of the world's
combinations, without noise or dropping, and reports the share of
utterances the world lexicon (the rules reasoner's reader) parses exactly,
the share of named values it reads right, and the values it reads that the
user did not say.
"""

from absl import app
from absl import flags

from experiments.common import cli
from experiments.common import outputs
from recovr_jax.envs.world.benchmark import lexicon
from recovr_jax.envs.world.user import simulated_user

_NUM = flags.DEFINE_integer('num_turns', 3000, 'Feedback turns per setting.')
_SEED = flags.DEFINE_integer('seed', 0, 'Seed of the pairs and the user.',
                             lower_bound=0)
_OUTPUT_JSON = flags.DEFINE_string('output_json',
                                   'results/user_language.json',
                                   'Where to write the report.')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  if _NUM.value < 1:
    raise app.UsageError(f'--num_turns must be >= 1, got {_NUM.value}')
  report = {}
  print('| style | language | utterances read exactly | mentions read right '
        '| wrong reads per turn |')
  print('|---|---|---:|---:|---:|')
  for style in simulated_user.STYLES:
    for language in simulated_user.LANGUAGES:
      config = simulated_user.UserConfig(style=style, language=language)
      r = simulated_user.parse_agreement(config, lexicon.parse, _NUM.value,
                                         _SEED.value)
      report[f'{style}/{language}'] = r
      print(f"| {style} | {language} | {100 * r['all']:.1f}% | "
            f"{100 * r['mentions_read']:.1f}% | "
            f"{r['wrong_reads_per_turn']:.3f} |")
  if _OUTPUT_JSON.value:
    outputs.write_json(_OUTPUT_JSON.value, report)


if __name__ == '__main__':
  cli.run(main)
