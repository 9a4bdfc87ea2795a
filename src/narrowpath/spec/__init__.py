"""spec: typed, validated, immutable descriptions of what is being run and on what."""
from narrowpath.spec.device import Device, Level
from narrowpath.spec.system import System, Tier
from narrowpath.spec.model import Model, MoE
from narrowpath.spec.plan import Plan
from narrowpath.spec.calibration import Calibration
from narrowpath.spec.scenario import Scenario

__all__ = ["Device", "Level", "System", "Tier", "Model", "MoE", "Plan", "Calibration", "Scenario"]
