"""xlac.conformance: how far xlac gets on ONNX models it did not write.

    python -m xlac.conformance                       # every case of every suite, a summary
    python -m xlac.conformance -k 'test_(lstm|gru)'  # cases whose id matches
    python -m xlac.conformance --suite node -k resize -v    # one line per case
    python -m xlac.conformance --report docs/onnx-support.md
    python -m xlac.conformance.real_models           # the real-model corpus alone
    python -m xlac.conformance.tool_models           # models from onnxruntime's tools

Developer tooling beside the compiler, not part of it; imports point one way:

    main.py            the command above: runs the cases, writes the report
      support_report.py  docs/onnx-support.md from the results
        cases.py           the onnx package's backend test cases through xlac.backend
      real_models.py     real models from PyPI packages against onnxruntime
      tool_models.py     onnxruntime's tools on small models of torch_models.py
"""
