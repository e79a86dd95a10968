"""``python -m numapin``: the same as the ``numapin`` command."""

import sys

from .cli import main

sys.exit(main())
