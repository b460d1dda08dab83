"""NumPy-style functions over gpukit arrays, each one call into the native module."""

from __future__ import annotations

from typing import Any, Optional, Sequence, Union

from . import _native
from ._native import Array

Axis = Optional[Union[int, Sequence[int]]]

__all__ = [
    "exp", "log", "sqrt", "tanh", "sin", "cos", "sigmoid", "relu", "abs", "absolute",
    "negative", "floor", "ceil", "round", "rint", "trunc", "sign", "invert", "bitwise_not",
    "isnan", "isinf", "isfinite", "logical_not", "logical_and", "logical_or", "logical_xor",
    "equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "where", "clip",
    "sum", "prod", "mean", "max", "min", "amax", "amin", "var", "std", "argmax", "argmin",
    "any", "all", "cumsum", "cumprod", "reshape", "transpose", "zeros_like", "ones_like",
    "empty_like", "full_like", "copy", "dot",
]


def _unary(name: str, doc: str):
    def f(x: Any) -> Array:
        return _native.unary(name, x)

    f.__name__ = name
    f.__qualname__ = name
    f.__doc__ = doc
    return f


exp = _unary("exp", "e**x, elementwise (integers compute in NumPy's float type).")
log = _unary("log", "Natural logarithm, elementwise.")
sqrt = _unary("sqrt", "Square root, elementwise.")
tanh = _unary("tanh", "Hyperbolic tangent, elementwise.")
sin = _unary("sin", "Sine, elementwise.")
cos = _unary("cos", "Cosine, elementwise.")
sigmoid = _unary("sigmoid", "1 / (1 + e**-x), elementwise.")
relu = _unary("relu", "max(x, 0), elementwise (NaN stays NaN).")
abs = _unary("abs", "Absolute value, elementwise.")  # noqa: A001
absolute = abs
negative = _unary("negative", "-x, elementwise.")
floor = _unary("floor", "Round down (the identity for integers).")
ceil = _unary("ceil", "Round up (the identity for integers).")
round = _unary("round", "Round to nearest, ties to even (the identity for integers).")  # noqa: A001
rint = _unary("rint", "Round to nearest, ties to even (integers give floats, as NumPy's rint).")
trunc = _unary("trunc", "Round toward zero (the identity for integers).")
sign = _unary("sign", "-1, 0 or 1 (NaN stays NaN).")
invert = _unary("invert", "Bitwise not (logical not for bool).")
bitwise_not = invert
isnan = _unary("isnan", "Whether each element is NaN (a bool array).")
isinf = _unary("isinf", "Whether each element is infinite (a bool array).")
isfinite = _unary("isfinite", "Whether each element is finite (a bool array).")
logical_not = _unary("logical_not", "Whether each element is zero (a bool array).")


def _binary(native, op: str, name: str, doc: str):
    def f(x1: Any, x2: Any) -> Array:
        return native(op, x1, x2)

    f.__name__ = name
    f.__qualname__ = name
    f.__doc__ = doc
    return f


logical_and = _binary(_native.logical, "and", "logical_and", "Truth values of x1 and x2 (a bool array).")
logical_or = _binary(_native.logical, "or", "logical_or", "Truth values of x1 or x2 (a bool array).")
logical_xor = _binary(_native.logical, "xor", "logical_xor", "Truth values of x1 xor x2 (a bool array).")
equal = _binary(_native.compare, "eq", "equal", "x1 == x2 (a bool array).")
not_equal = _binary(_native.compare, "ne", "not_equal", "x1 != x2 (a bool array).")
less = _binary(_native.compare, "lt", "less", "x1 < x2 (a bool array).")
less_equal = _binary(_native.compare, "le", "less_equal", "x1 <= x2 (a bool array).")
greater = _binary(_native.compare, "gt", "greater", "x1 > x2 (a bool array).")
greater_equal = _binary(_native.compare, "ge", "greater_equal", "x1 >= x2 (a bool array).")


def where(condition: Any, x: Any, y: Any) -> Array:
    """Elements of x where condition is true, else of y (NumPy's result type)."""
    return _native.where(condition, x, y)


def clip(a: Array, a_min: Any = None, a_max: Any = None) -> Array:
    """Values limited to [a_min, a_max] (either may be None)."""
    return a.clip(a_min, a_max)


def sum(a: Array, axis: Axis = None, keepdims: bool = False) -> Any:  # noqa: A001
    """Sum over axis (None: all); integers widen to 64 bits, as NumPy's."""
    return a.sum(axis=axis, keepdims=keepdims)


def prod(a: Array, axis: Axis = None, keepdims: bool = False) -> Any:
    """Product over axis."""
    return a.prod(axis=axis, keepdims=keepdims)


def mean(a: Array, axis: Axis = None, keepdims: bool = False) -> Any:
    """Mean over axis (float64 for integers)."""
    return a.mean(axis=axis, keepdims=keepdims)


def max(a: Array, axis: Axis = None, keepdims: bool = False) -> Any:  # noqa: A001
    """Maximum over axis (NaN propagates)."""
    return a.max(axis=axis, keepdims=keepdims)


def min(a: Array, axis: Axis = None, keepdims: bool = False) -> Any:  # noqa: A001
    """Minimum over axis (NaN propagates)."""
    return a.min(axis=axis, keepdims=keepdims)


amax = max
amin = min


def var(a: Array, axis: Axis = None, keepdims: bool = False, ddof: int = 0) -> Any:
    """Variance over axis with ddof delta degrees of freedom."""
    return a.var(axis=axis, keepdims=keepdims, ddof=ddof)


def std(a: Array, axis: Axis = None, keepdims: bool = False, ddof: int = 0) -> Any:
    """Standard deviation over axis."""
    return a.std(axis=axis, keepdims=keepdims, ddof=ddof)


def argmax(a: Array, axis: Optional[int] = None, keepdims: bool = False) -> Any:
    """Index of the maximum (flat without axis)."""
    return a.argmax(axis=axis, keepdims=keepdims)


def argmin(a: Array, axis: Optional[int] = None, keepdims: bool = False) -> Any:
    """Index of the minimum (flat without axis)."""
    return a.argmin(axis=axis, keepdims=keepdims)


def any(a: Array, axis: Axis = None, keepdims: bool = False) -> Any:  # noqa: A001
    """Whether any element is nonzero."""
    return a.any(axis=axis, keepdims=keepdims)


def all(a: Array, axis: Axis = None, keepdims: bool = False) -> Any:  # noqa: A001
    """Whether every element is nonzero."""
    return a.all(axis=axis, keepdims=keepdims)


def cumsum(a: Array, axis: Optional[int] = None) -> Array:
    """Cumulative sum (of the flattened array without axis)."""
    return a.cumsum(axis)


def cumprod(a: Array, axis: Optional[int] = None) -> Array:
    """Cumulative product (of the flattened array without axis)."""
    return a.cumprod(axis)


def reshape(a: Array, shape: Any) -> Array:
    """a with another shape (-1 infers one extent)."""
    return a.reshape(shape)


def transpose(a: Array, axes: Optional[Sequence[int]] = None) -> Array:
    """a with its axes permuted (reversed without axes); a view."""
    return a.transpose() if axes is None else a.transpose(tuple(axes))


def zeros_like(a: Array, dtype: Any = None) -> Array:
    """Zeros of a's shape (and type, unless dtype is given)."""
    return _native.zeros(a.shape, a.dtype if dtype is None else dtype, a.device)


def ones_like(a: Array, dtype: Any = None) -> Array:
    """Ones of a's shape (and type, unless dtype is given)."""
    return _native.ones(a.shape, a.dtype if dtype is None else dtype, a.device)


def empty_like(a: Array, dtype: Any = None) -> Array:
    """An uninitialised array of a's shape (and type, unless dtype is given)."""
    return _native.empty(a.shape, a.dtype if dtype is None else dtype, a.device)


def full_like(a: Array, fill_value: Any, dtype: Any = None) -> Array:
    """fill_value in a's shape (and type, unless dtype is given)."""
    return _native.full(a.shape, fill_value, a.dtype if dtype is None else dtype, a.device)


def copy(a: Array) -> Array:
    """A copy of a."""
    return a.copy()


def dot(a: Array, b: Array) -> Array:
    """Matrix product for 1-D and 2-D operands (matmul)."""
    return _native.matmul(a, b)
