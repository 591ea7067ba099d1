"""xlac: ahead-of-time compiler for neural-network inference."""
