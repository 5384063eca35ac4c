"""``python -m synapse_core.worker TARGET --spec JSON``: see :mod:`.entry`."""

import sys

from .entry import main

sys.exit(main())
