"""catalog: devices, systems, models, calibration profiles and named scenarios shipped as YAML data.

Ids are exact; an unknown id raises CatalogError listing the nearest ids; a duplicate id is an error.
"""
from narrowpath.catalog.store import (
    calibration_for, device, device_ids, model, model_ids, scenario_ids, scenario_data, system,
    system_ids, entries,
)
from narrowpath.catalog.resolve import DEFAULT_SCENARIO, load_scenario, scenario_from_dict, system_for_hardware

__all__ = ["calibration_for", "device", "device_ids", "model", "model_ids", "scenario_ids", "scenario_data",
           "system", "system_ids", "entries", "DEFAULT_SCENARIO", "load_scenario", "scenario_from_dict",
           "system_for_hardware"]
