"""Where the caches go: the per-user folder, as HF's caches are found."""

import os
import pathlib
import tempfile
from unittest import mock

from absl.testing import absltest

from recovr_jax import paths
from tests.helpers import runs


class CacheTest(absltest.TestCase):

  def test_the_cache_folder_follows_the_environment(self):
    home = pathlib.Path(tempfile.mkdtemp())
    clean = {k: v for k, v in os.environ.items()
             if k not in (paths.CACHE_VARIABLE, 'XDG_CACHE_HOME')}
    with mock.patch.dict(os.environ, dict(clean, HOME=str(home)),
                         clear=True):
      self.assertEqual(paths.cache_root(),
                       home / '.cache' / 'recovr_jax')
      os.environ['XDG_CACHE_HOME'] = str(home / 'xdg')
      self.assertEqual(paths.cache_root(), home / 'xdg' / 'recovr_jax')
      os.environ[paths.CACHE_VARIABLE] = str(home / 'mine')
      self.assertEqual(paths.cache_root(), home / 'mine')
      # Unset: that folder; '' keeps none; a path (relative ones too, as
      # older runs named them) is itself.
      self.assertEqual(paths.cache_dir(None), str(home / 'mine'))
      self.assertEqual(paths.cache_dir(''), '')
      self.assertEqual(paths.cache_dir('cache'), 'cache')
      # The command line's config resolves an unset --cache_dir.
      self.assertEqual(runs.config_of().cache_dir, str(home / 'mine'))
      self.assertEqual(runs.config_of(cache_dir='cache').cache_dir, 'cache')


  def test_the_key_file_is_outside_every_cache(self):
    home = pathlib.Path(tempfile.mkdtemp())
    clean = {k: v for k, v in os.environ.items()
             if k not in (paths.KEY_VARIABLE, 'XDG_CONFIG_HOME',
                          paths.CACHE_VARIABLE, 'XDG_CACHE_HOME')}
    with mock.patch.dict(os.environ, dict(clean, HOME=str(home)),
                         clear=True):
      key = paths.key_file()
      self.assertEqual(key, home / '.config/recovr_jax/kept-programs.key')
      self.assertFalse(key.is_relative_to(paths.cache_root()))
      os.environ['XDG_CONFIG_HOME'] = str(home / 'conf')
      self.assertEqual(paths.key_file(),
                       home / 'conf/recovr_jax/kept-programs.key')
      os.environ[paths.KEY_VARIABLE] = str(home / 'k')
      self.assertEqual(paths.key_file(), home / 'k')

if __name__ == '__main__':
  absltest.main()
