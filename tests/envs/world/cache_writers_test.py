"""Two writers of one cache file at once (two runs ending together): each
writes under a name of its own and renames a whole file (they shared one
temporary name, and 8-88 of 150 saves failed)."""

import pathlib
import threading

from absl.testing import absltest
import numpy as np

from recovr_jax import checksums
from recovr_jax.envs.world.models import encoders


class CacheWritersTest(absltest.TestCase):

  def test_two_writers_of_one_text_cache(self):
    path = pathlib.Path(self.create_tempdir().full_path) / 'text-x.npz'
    errors = []

    def writer(seed):
      enc = encoders.TextEncoder(batch_size=16, max_length=32, shared=False)
      rng = np.random.default_rng(seed)
      try:
        for i in range(40):
          enc._cache[f'text {seed} {i}'] = rng.random(enc.dim, np.float32)  # pylint: disable=protected-access
          enc.save_cache(path)
      except Exception as e:  # pylint: disable=broad-except
        errors.append(e)

    threads = [threading.Thread(target=writer, args=(s,)) for s in (1, 2)]
    for t in threads:
      t.start()
    for t in threads:
      t.join()
    self.assertEqual(errors, [])
    reader = encoders.TextEncoder(batch_size=16, max_length=32, shared=False)
    self.assertEqual(reader.load_cache(path), 40)  # one writer's whole file
    self.assertEqual([p.name for p in path.parent.iterdir()], [path.name])

  def test_temporary_names_differ_by_writer(self):
    names = set()
    together = threading.Barrier(2)  # both alive: their ids differ

    def name():
      names.add(checksums.writer_temp('/c/text-x.npz').name)
      together.wait()
    threads = [threading.Thread(target=name) for _ in range(2)]
    for t in threads:
      t.start()
    for t in threads:
      t.join()
    names.add(checksums.writer_temp('/c/text-x.npz').name)  # this thread's
    self.assertLen(names, 3)
    self.assertTrue(all(n.startswith('.text-x.npz.') and
                        n.endswith('.tmp.npz') for n in names))


if __name__ == '__main__':
  absltest.main()
