"""Front ends that turn source models into HLO modules (``xlac.importers.onnx``)."""
