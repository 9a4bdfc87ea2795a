"""measure stage: probes of the machine it runs on, nccl-tests import, and fits into a calibration profile.

Files, each with one job:
- `timing.py`: warm-up/repeat/median timing, progress on stderr, provenance of a probe result.
- `machine.py`: what the OS says about this machine (CPU name, cache sizes, memory, a peak-FLOP/s estimate).
- `segment.py`: plateau detection in a curve (memory levels, locality cliffs).
- `compute_probe.py`, `memory_probe.py`, `locality_probe.py`, `collectives_probe.py`: the probes.
- `busbw.py`: nccl-tests bus-bandwidth conventions. `nccl_tests.py`: the nccl-tests log parser.
- `fit.py`: α-β and GEMM-ramp fits with residuals. `profile.py`: probe results → calibration profile YAML.
- `shipped.py` + `public_points.yaml`: the public measurements behind the shipped catalog profiles.

torch is imported lazily inside probe functions only: the rest of narrowpath works without it.
"""
