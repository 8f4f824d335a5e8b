"""``python -m lazystore``: the command line (see ``lazystore.cli``)."""

import sys

from lazystore.cli import main

sys.exit(main())
