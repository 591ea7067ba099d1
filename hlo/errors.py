"""The exception the compiler raises for bad input or unsupported models, and the
warning it gives for input it compiles but may get wrong.

Everything user-facing (the CLI, xlac.compile) turns an XlacError into a single
line on stderr; any other exception is a bug in xlac.

A message that tells the user how to fix something names the fix the way the
caller spells it: ``input_shapes={"x": (1, 64)}`` from Python, ``--input-shape
x=1x64`` from the command line. The exception carries both: ``str(e)`` is the
Python wording, ``e.cli`` the command line's (the same text where no option is
named).
"""


class XlacError(Exception):
    def __init__(self, message: str = "", cli: str | None = None):
        super().__init__(message)
        self.cli = message if cli is None else cli


class XlacWarning(UserWarning):
    """Something xlac compiles but may get wrong (a model newer than the onnx package
    knows). The CLI prints it as ``xlac: warning: ...``; ``--strict`` (``strict=True``)
    makes it an error."""
