"""Unit constants. SI inside narrowpath; convert only at the edges. GB = 1e9 bytes, GiB = 2**30 bytes."""
KB = 1e3
MB = 1e6
GB = 1e9
TB = 1e12
KiB = 2**10
MiB = 2**20
GiB = 2**30
TiB = 2**40
US = 1e-6
NS = 1e-9
MS = 1e-3
TFLOP = 1e12
GBIT_PER_S = 1e9 / 8  # bytes per second in one Gb/s

BYTES_PER_DTYPE = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}
