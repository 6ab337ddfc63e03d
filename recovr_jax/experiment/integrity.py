"""Content hashes of what a run reads, so that its identity covers them.

A run's ``resolved_config.json`` holds the SHA-256 of every file and
directory that can change its numbers (encoder, captioner and reasoner
checkpoints, the text encoder, real-data files); resume compares them, so
a retrained checkpoint or an edited CSV is a different run, not a silent
mix of batches.
"""

from recovr_jax import checksums

path_digest = checksums.path_digest


def input_paths(config) -> dict[str, str]:
  """Name -> path of every file or directory ``config`` reads that can
  change its numbers (defaults resolved)."""
  paths = {}
  if config.data == 'world':
    from recovr_jax.world import encoders  # pylint: disable=g-import-not-at-top
    paths['checkpoint_dir'] = (config.checkpoint_dir or
                               encoders.DEFAULT_CHECKPOINT_DIR)
    paths['text_encoder'] = encoders.minilm_path()
    if config.captions == 'model':
      from recovr_jax.world import captioner  # pylint: disable=g-import-not-at-top
      paths['captioner_checkpoint'] = (config.captioner_checkpoint or
                                       captioner.DEFAULT_CAPTIONER_DIR)
    if config.reasoner == 'flax_lm':
      from recovr_jax.world import reasoner_training  # pylint: disable=g-import-not-at-top
      paths['reasoner_checkpoint'] = (config.reasoner_checkpoint or
                                      reasoner_training.DEFAULT_REASONER_DIR)
  else:
    for name in ('annotations', 'gallery_embeddings', 'clip_dir',
                 'reference_embeddings', 'query_embeddings',
                 'reasoner_checkpoint'):
      if getattr(config, name):
        paths[name] = getattr(config, name)
  if config.user_phraser == 'smollm2':
    from recovr_jax.reasoning import gguf_llama  # pylint: disable=g-import-not-at-top
    paths['user_phraser_gguf'] = str(gguf_llama.find_smollm2())
  if config.reasoner in ('smollm2', 'smollm2_world'):
    from recovr_jax.reasoning import chat_lm  # pylint: disable=g-import-not-at-top
    from recovr_jax.reasoning import gguf_llama  # pylint: disable=g-import-not-at-top
    if config.reasoner_checkpoint:
      paths['reasoner_checkpoint'] = config.reasoner_checkpoint
    else:
      paths['reasoner_gguf'] = str(gguf_llama.find_smollm2())
    if config.reasoner == 'smollm2_world':
      paths['reasoner_adapter'] = chat_lm.DEFAULT_ADAPTER_DIR
  return paths


def input_hashes(config) -> dict[str, dict[str, str]]:
  """Name -> ``{'path', 'sha256'}`` of ``input_paths(config)``."""
  return {name: {'path': str(path), 'sha256': path_digest(path)}
          for name, path in input_paths(config).items()}
