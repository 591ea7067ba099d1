"""``python -m xlac.conformance ...``: run the ONNX backend test cases (main.py)."""
import sys

from .main import main

sys.exit(main())
