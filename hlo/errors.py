"""The one exception type the compiler raises for bad input or unsupported models.

Everything user-facing (the CLI, xlac.compile) turns an XlacError into a single
line on stderr; any other exception is a bug in xlac.
"""


class XlacError(Exception):
    pass
