"""The array types of the model (numpy arrays by element type), in a module of their own so that
every model module can use them without importing another."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]
