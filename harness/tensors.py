"""Raw tensor files: how reference inputs and outputs travel to a runner.

Raw little-endian, C-contiguous bytes plus a `{dtype, shape, file}` descriptor, because the
native runner must read them without a tensor library and a device receives them by `adb push`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

DTYPES = ("float32", "float16", "int64", "int32", "int8", "uint8", "bool")


@dataclasses.dataclass(frozen=True)
class TensorFile:
    dtype: str
    shape: tuple[int, ...]
    file: Path

    def to_json(self, base: Path | None = None) -> dict:
        path = Path(self.file)
        if base is not None and path.is_relative_to(base):
            path = path.relative_to(base)
        return {"dtype": self.dtype, "shape": list(self.shape), "file": str(path)}

    @classmethod
    def from_json(cls, data: dict, base: Path) -> "TensorFile":
        file = Path(data["file"])
        return cls(data["dtype"], tuple(data["shape"]), file if file.is_absolute() else base / file)


def save_tensor(tensor, path: Path) -> TensorFile:
    """Write a torch tensor as raw bytes (torch is only imported by the caller)."""
    array = tensor.detach().contiguous().cpu().numpy()
    dtype = str(array.dtype)
    if dtype not in DTYPES:
        raise ValueError(f"unsupported tensor dtype {dtype}; supported: {', '.join(DTYPES)}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(array.astype(array.dtype.newbyteorder("<")).tobytes())
    return TensorFile(dtype, tuple(array.shape), path)


def load_array(tensor: TensorFile):
    """Read a tensor file as a numpy array."""
    import numpy as np

    return np.fromfile(tensor.file, dtype=np.dtype(tensor.dtype).newbyteorder("<")).reshape(
        tensor.shape)
