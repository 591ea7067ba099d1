"""XLA's ops that our opcode table lacks, expanded into ours, as XLA's own expander
passes do for its CPU backend (CholeskyExpander, TriangularSolveExpander,
SelectAndScatterExpander, RngBitGeneratorExpander, BatchNormExpander, the
reduce-precision emitter): the HLO and StableHLO importers share them, and the LAPACK
calls JAX's CPU lowering writes map onto them. Each takes ``where``, the computation
being built (``Where``: its module and a Builder over it), or that Builder, and
operands, and returns the result values."""
from .batch_norm import batch_norm_grad, batch_norm_inference, batch_norm_training
from .bits import bitcast_convert, reduce_precision
from .common import Where
from .computations import inline, map_elementwise, select_and_scatter
from .linalg import (backend_config, cholesky, is_lapack_call, lapack_call, lu, refused_call,
                     triangular_solve)
from .rng import RNG_ALGORITHMS, rng_bit_generator

__all__ = ["Where", "backend_config", "batch_norm_grad", "batch_norm_inference",
           "batch_norm_training", "bitcast_convert", "cholesky", "inline", "is_lapack_call",
           "lapack_call", "lu", "map_elementwise", "reduce_precision", "refused_call",
           "RNG_ALGORITHMS", "rng_bit_generator", "select_and_scatter", "triangular_solve"]
