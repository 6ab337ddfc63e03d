"""Where the package's shipped files are (every module finds them here,
wherever it sits in the package)."""

import pathlib

PACKAGE = pathlib.Path(__file__).parent
CHECKPOINTS = PACKAGE / 'checkpoints'
