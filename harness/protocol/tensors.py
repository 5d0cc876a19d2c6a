"""Raw tensor files: how reference inputs and outputs travel to a runner.

Raw little-endian, C-contiguous bytes plus a `{dtype, shape, file}` descriptor, because the
native runner must read them without a tensor library and a device receives them by `adb push`.
numpy has no bfloat16, so ml_dtypes (the dtype extensions JAX and TensorFlow share) gives it
one: every dtype of `harness.protocol.scenario_file.DTYPES` is then a numpy dtype, read and written alike.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.protocol.scenario_file import DTYPES as _ITEM_SIZES
from harness.protocol.scenario_file import FLOAT_DTYPES

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

# torch is imported only by the callers that have it; its tensors are checked as Any.
Tensor = Any

DTYPES = tuple(_ITEM_SIZES)


@dataclasses.dataclass(frozen=True)
class TensorFile:
    dtype: str
    shape: tuple[int, ...]
    file: Path

    def to_json(self, base: Path | None = None) -> dict[str, Any]:
        path = Path(self.file)
        if base is not None and path.is_relative_to(base):
            path = path.relative_to(base)
        return {"dtype": self.dtype, "shape": list(self.shape), "file": str(path)}

    @classmethod
    def from_json(cls, data: dict[str, Any], base: Path) -> TensorFile:
        file = Path(data["file"])
        return cls(data["dtype"], tuple(data["shape"]), file if file.is_absolute() else base / file)


def numpy_dtype(name: str) -> np.dtype[Any]:
    """The little-endian numpy dtype of a protocol dtype name (bfloat16 from ml_dtypes)."""
    import numpy as np

    if name not in _ITEM_SIZES:
        raise ValueError(f"unsupported tensor dtype {name}; supported: {', '.join(DTYPES)}")
    if name == "bfloat16":
        import ml_dtypes

        bfloat16: np.dtype[Any] = np.dtype(ml_dtypes.bfloat16)
        return bfloat16
    return np.dtype(name).newbyteorder("<")


def dtype_name(array: npt.NDArray[Any]) -> str:
    """The protocol dtype name of a numpy array ("bool", "bfloat16", "uint16", ...)."""
    import numpy as np

    return "bool" if array.dtype == np.bool_ else str(array.dtype.name)


def is_float(dtype: str) -> bool:
    """Floating dtypes compare within tolerance, all others exactly."""
    return dtype in FLOAT_DTYPES


def write_array(array: npt.ArrayLike, path: Path) -> TensorFile:
    """Write a numpy array as raw little-endian bytes; ValueError for a dtype the runners do
    not read."""
    import numpy as np

    contiguous = np.ascontiguousarray(array)
    dtype = dtype_name(contiguous)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(contiguous.astype(numpy_dtype(dtype)).tobytes())
    return TensorFile(dtype, tuple(contiguous.shape), path)


def torch_to_numpy(tensor: Tensor) -> npt.NDArray[Any]:
    """A torch tensor as a numpy array of the same dtype, bfloat16 and unsigned types included
    (torch's .numpy() refuses bfloat16)."""
    import numpy as np
    import torch

    tensor = tensor.detach().contiguous().cpu()
    name = str(tensor.dtype).removeprefix("torch.")
    raw = tensor.reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b""
    return np.frombuffer(raw, dtype=numpy_dtype(name)).reshape(tuple(tensor.shape))


def numpy_to_torch(array: npt.NDArray[Any]) -> Tensor:
    """A numpy array (any protocol dtype) as a torch tensor of that dtype."""
    import torch

    name = dtype_name(array)
    dtype = getattr(torch, name)
    data = bytearray(array.astype(numpy_dtype(name)).tobytes())
    if not data:
        return torch.zeros(tuple(array.shape), dtype=dtype)
    return torch.frombuffer(data, dtype=dtype).reshape(tuple(array.shape))


def save_tensor(tensor: Tensor, path: Path) -> TensorFile:
    """Write a torch tensor as raw bytes (torch is only imported by the caller)."""
    return write_array(torch_to_numpy(tensor), path)


def load_array(tensor: TensorFile) -> npt.NDArray[Any]:
    """Read a tensor file as a numpy array."""
    import numpy as np

    return np.fromfile(tensor.file, dtype=numpy_dtype(tensor.dtype)).reshape(tensor.shape)
