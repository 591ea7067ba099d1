"""``python -m xlac ...``: the ``xlac`` command, for when the console script is not on PATH."""
import sys

from .main import main

sys.exit(main())
