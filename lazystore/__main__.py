"""``python -m lazystore``: the command line (see ``lazystore.cli``)."""

import sys

from .cli import main

sys.exit(main())
