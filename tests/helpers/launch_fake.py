"""A stand-in entry point for tests/run/distributed_test.py: process 1 fails at
once, the others wait to be stopped."""

import sys
import time

if __name__ == '__main__':
  pid = int([a for a in sys.argv if a.startswith('--process_id=')][0]
            .split('=')[1])
  if pid == 1:
    sys.exit(3)
  time.sleep(120)
