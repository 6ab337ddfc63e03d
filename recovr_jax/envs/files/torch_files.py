"""Float tensors from ``torch.save`` files, without torch.

A ``.pth`` / ``.pt`` file written by ``torch.save`` (the zip format, torch
>= 1.6) is a zip archive: ``<prefix>/data.pkl`` (a pickle whose tensors are
``torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...)``
calls and whose storages are persistent ids ``('storage', <dtype>Storage,
key, location, numel)``), ``<prefix>/data/<key>`` (each storage's raw
bytes) and ``<prefix>/byteorder``. ``load`` reads it with a restricted
unpickler: the only globals it resolves are that rebuild function, the float
storage types and ``collections.OrderedDict`` (empty backward hooks);
anything else (code, modules, other objects) is refused with the file named.
What it returns: a NumPy array, or a dict / list / tuple of them.
"""

import collections
import io
import pickle
import zipfile

import numpy as np

# torch storage class -> NumPy dtype (float tensors only).
_STORAGES = {'FloatStorage': np.float32, 'DoubleStorage': np.float64,
             'HalfStorage': np.float16, 'BFloat16Storage': 'bfloat16'}


class TorchFileError(ValueError):
  """A file that is not a torch zip of float tensors; names the file."""


class _Storage:
  def __init__(self, dtype, key, numel):
    self.dtype, self.key, self.numel = dtype, key, numel


def _rebuild_tensor_v2(storage, offset, size, stride, requires_grad=False,
                       backward_hooks=None, metadata=None):
  del requires_grad, backward_hooks, metadata
  return ('tensor', storage, int(offset), tuple(size), tuple(stride))


class _Unpickler(pickle.Unpickler):
  """Resolves only what a file of float tensors needs."""

  def __init__(self, data, path):
    super().__init__(io.BytesIO(data))
    self.path = path

  def find_class(self, module, name):
    if (module, name) == ('torch._utils', '_rebuild_tensor_v2'):
      return _rebuild_tensor_v2
    if module == 'torch' and name in _STORAGES:
      return name
    if (module, name) == ('collections', 'OrderedDict'):
      return collections.OrderedDict
    raise TorchFileError(f'{self.path}: refusing {module}.{name} (only float '
                         'tensors and dicts/lists of them are read)')

  def persistent_load(self, pid):
    if (not isinstance(pid, tuple) or len(pid) != 5 or pid[0] != 'storage'
        or pid[1] not in _STORAGES):
      raise TorchFileError(f'{self.path}: unsupported storage {pid!r} (float '
                           'tensors only)')
    return _Storage(_STORAGES[pid[1]], str(pid[2]), int(pid[4]))


def _check_view(path, offset, size, stride, numel) -> None:
  """A tensor's view of its storage is read only when every index it
  reaches lies in the storage and it holds no more values than the storage
  (strides of 1 or more on every dimension longer than 1; a crafted header
  with a negative or zero stride, or a size beyond the storage, is refused
  before anything is allocated or read)."""
  if not all(type(x) is int for x in (offset, *size, *stride)):  # pylint: disable=unidiomatic-typecheck
    raise TorchFileError(f'{path}: a tensor header holds a non-integer '
                         f'offset, size or stride ({offset}, {size}, '
                         f'{stride})')
  if len(size) != len(stride):
    raise TorchFileError(f'{path}: a tensor has {len(size)} sizes but '
                         f'{len(stride)} strides')
  if offset < 0 or any(n < 0 for n in size):
    raise TorchFileError(f'{path}: a tensor has a negative offset or size '
                         f'(offset {offset}, size {size})')
  if 0 in size:
    return  # an empty tensor reads nothing
  if any(s < 1 for n, s in zip(size, stride) if n > 1):
    raise TorchFileError(f'{path}: a tensor has stride {stride} for size '
                         f'{size}; only positive strides are read')
  count = 1
  for n in size:
    count *= n
  if count > numel:
    raise TorchFileError(f'{path}: a tensor of size {size} ({count:,} '
                         f'values) over a storage of {numel:,}')
  if offset + sum((n - 1) * s for n, s in zip(size, stride)) + 1 > numel:
    raise TorchFileError(f'{path}: a tensor reaches past its storage '
                         f'(offset {offset}, size {size}, stride {stride}, '
                         f'storage {numel:,} values)')


def _dtype(name):
  if name == 'bfloat16':
    import ml_dtypes  # pylint: disable=g-import-not-at-top
    return np.dtype(ml_dtypes.bfloat16)
  return np.dtype(name)


def load(path):
  """The arrays of the ``torch.save`` file ``path`` (float32 when the file
  holds half precision; shapes as saved)."""
  try:
    archive = zipfile.ZipFile(path)
  except (zipfile.BadZipFile, OSError) as e:
    raise TorchFileError(f'{path}: not a torch zip file ({e})') from e
  with archive:
    names = archive.namelist()
    pickles = [n for n in names if n.endswith('data.pkl')]
    if len(pickles) != 1:
      raise TorchFileError(f'{path}: expected one data.pkl in the archive, '
                           f'found {len(pickles)}')
    prefix = pickles[0][:-len('data.pkl')]
    order = b'little'
    if prefix + 'byteorder' in names:
      order = archive.read(prefix + 'byteorder').strip()
    if order not in (b'little', b'big'):
      raise TorchFileError(f'{path}: unknown byte order {order!r}')
    try:
      tree = _Unpickler(archive.read(pickles[0]), path).load()
    except TorchFileError:
      raise
    except Exception as e:  # pylint: disable=broad-except
      raise TorchFileError(f'{path}: cannot unpickle data.pkl ({e})') from e
    cache = {}

    def build(node):
      if isinstance(node, tuple) and node and node[0] == 'tensor':
        _, storage, offset, size, stride = node
        if storage.key not in cache:
          record = f'{prefix}data/{storage.key}'
          if record not in names:
            raise TorchFileError(f'{path}: storage {record} is missing')
          dtype = _dtype(storage.dtype).newbyteorder(
              '<' if order == b'little' else '>')
          flat = np.frombuffer(archive.read(record), dtype)
          if flat.size != storage.numel:
            raise TorchFileError(f'{path}: storage {record} holds {flat.size}'
                                 f' values, the pickle says {storage.numel}')
          cache[storage.key] = flat
        flat = cache[storage.key]
        itemsize = flat.dtype.itemsize
        _check_view(path, offset, size, stride, flat.size)
        view = np.lib.stride_tricks.as_strided(
            flat[offset:], shape=size,
            strides=tuple(s * itemsize for s in stride))
        return np.array(view, dtype=np.float32 if itemsize <= 4 else
                        np.float64)
      if isinstance(node, dict):
        return {k: build(v) for k, v in node.items()}
      if isinstance(node, (list, tuple)):
        return type(node)(build(v) for v in node)
      return node

    return build(tree)


def save(path, array, prefix: str = 'archive', header=None) -> None:
  """Writes ``array`` (float32) as ``torch.save`` does (the zip layout and
  pickle opcodes torch writes), without torch: for tests and for handing
  features to torch code. ``header``: ``(offset, size, stride)`` written
  instead of the array's own (tests craft hostile files with it)."""
  array = np.ascontiguousarray(array, np.float32)
  stride = []
  acc = 1
  for n in reversed(array.shape):
    stride.insert(0, acc)
    acc *= n
  offset, shape = 0, array.shape
  if header is not None:
    offset, shape, stride = header
  out = io.BytesIO()
  w = out.write
  unicode = lambda s: b'X' + len(s.encode()).to_bytes(4, 'little') + s.encode()
  ints = lambda xs: b'(' + b''.join(b'J' + int(x).to_bytes(
      4, 'little', signed=True) for x in xs) + b't'
  w(b'\x80\x02')                                      # PROTO 2
  w(b'ctorch._utils\n_rebuild_tensor_v2\n')          # GLOBAL
  w(b'(')                                             # MARK (args)
  w(b'(' + unicode('storage') + b'ctorch\nFloatStorage\n' + unicode('0') +
    unicode('cpu') + b'J' + array.size.to_bytes(4, 'little') + b'tQ')
  w(b'J' + int(offset).to_bytes(4, 'little', signed=True))  # storage offset
  w(ints(shape) + ints(stride))                       # size, stride
  w(b'\x89')                                          # requires_grad False
  w(b'ccollections\nOrderedDict\n)R')                # backward hooks
  w(b'tR.')                                           # TUPLE REDUCE STOP
  with zipfile.ZipFile(path, 'w', zipfile.ZIP_STORED) as z:
    z.writestr(f'{prefix}/data.pkl', out.getvalue())
    z.writestr(f'{prefix}/byteorder', 'little')
    z.writestr(f'{prefix}/data/0', array.tobytes())
    z.writestr(f'{prefix}/version', '3\n')
