"""Catalog devices and calibration profiles that `extends` another (catalog.store._inherit): one place for a figure
two devices share, so that a refit of H100's constants reaches the H200, H800 and H100 96 GB profiles."""
from __future__ import annotations

import pytest

from narrowpath.catalog import calibration_for, device
from narrowpath.catalog.store import _inherit, entries
from narrowpath.errors import CatalogError

TABLE = {
    "base": {"id": "base", "device": "base", "matrix_efficiency": {"bf16": 0.5, "fp8": 0.6}, "flash_efficiency": 0.7,
             "tiers": {"scale_up": {"bw_efficiency": 0.8}}, "sources": {"matrix_efficiency": "fit", "all": "base's"}},
    "child": {"id": "child", "device": "child", "extends": "base", "tiers": {"scale_up": {"bw_efficiency": 0.7}},
              "sources": {"all": "child's"}},
}


def test_child_takes_the_parents_keys_and_replaces_what_it_states():
    """Keys the child states replace the parent's whole (tiers here: no deep merge); the rest are the parent's;
    id, device and extends are the child's own; sources merge key by key."""
    got = _inherit("profiles", TABLE["child"], TABLE)
    assert got == {"id": "child", "device": "child", "matrix_efficiency": {"bf16": 0.5, "fp8": 0.6},
                   "flash_efficiency": 0.7, "tiers": {"scale_up": {"bw_efficiency": 0.7}},
                   "sources": {"matrix_efficiency": "fit", "all": "child's"}}


def test_a_device_variant_names_its_own_default_system():
    """A device's default system is its own box (an H200 variant is not sold in a DGX H100): not inherited."""
    table = {"d": {"id": "d", "default_system": "box-d", "aliases": ["D"]}, "e": {"id": "e", "extends": "d"}}
    assert _inherit("devices", table["e"], table) == {"id": "e"}


def test_an_entry_without_extends_is_returned_as_it_is():
    assert _inherit("profiles", TABLE["base"], TABLE) is TABLE["base"]


@pytest.mark.parametrize("table, why", [
    ({"child": {"id": "child", "extends": "nowhere"}}, "unknown parent"),
    ({"a": {"id": "a", "extends": "b"}, "b": {"id": "b"}}, "a later entry"),
    ({"a": {"id": "a"}, "b": {"id": "b", "extends": "a"}, "c": {"id": "c", "extends": "b"}}, "a chain"),
    ({"a": {"id": "a"}, "b": {"id": "b", "extends": ["a"]}}, "not a name"),
])
def test_bad_extends_is_one_line_naming_the_entry(table, why):
    last = list(table)[-1] if why != "a later entry" else "a"
    with pytest.raises(CatalogError, match=rf"calibration.yaml: {last} extends .*not an earlier entry") as exc:
        _inherit("profiles", table[last], table)
    assert "\n" not in str(exc.value), why


def test_shipped_profiles_follow_their_parents():
    """The H100-die profiles carry H100's fitted constants (their matrix efficiencies are H100's object-for-object
    equal values), B300 carries B200's; the H800 keeps its own NVLink figure (0.80 of 200 GB/s, DeepSeek-V3 report
    §3.2.2) over H100's 0.82."""
    h100 = calibration_for("H100-SXM5-80GB")
    for child in ("H200-SXM-141GB", "H100-SXM5-96GB", "H100-SXM5-96GB-HBM2e", "H800-SXM5-80GB"):
        assert entries("profiles")[child]["device"] == child
        cal = calibration_for(child)
        assert (cal.matrix_efficiency, cal.flash_efficiency, cal.host_sync_s) == \
               (h100.matrix_efficiency, h100.flash_efficiency, h100.host_sync_s), child
    assert calibration_for("B300").matrix_efficiency == calibration_for("B200").matrix_efficiency
    assert calibration_for("H800-SXM5-80GB").tiers["scale_up"].bw_efficiency == 0.80
    assert h100.tiers["scale_up"].bw_efficiency == 0.82


def test_shipped_device_variants_differ_only_in_memory():
    """H200 and the H100 96 GB parts are the H100 SXM5 die with other HBM: the same tensor-core peaks, their own
    HBM capacity and bandwidth (H200: 141 GB binary = 150.7e9 B at 4.8 TB/s, datasheet)."""
    h100, h200 = device("H100-SXM5-80GB"), device("H200-SXM-141GB")
    assert h200.peak_matrix_flop_per_s == h100.peak_matrix_flop_per_s
    hbm = {lv.name: lv for lv in h200.levels}["hbm"]
    assert (hbm.capacity_bytes, hbm.bw_bytes_per_s) == (150.7e9, 4.8e12)
    assert device("A100-SXM4-40GB").peak_matrix_flop_per_s == device("A100-SXM4-80GB").peak_matrix_flop_per_s


def test_the_parents_of_the_shipped_profiles_are_readable():
    """`entries` resolves `extends` and drops the key, so a tool that needs the chain (benchmarks/loso_refit.py:
    which fitted constants a device carries) reads `parents`: until the fifty-sixth session it looked for `extends`
    in the resolved entries, found none, and B300's cases — B200's constants — were never refitted in a fold."""
    from narrowpath.catalog.store import parents
    p = parents("profiles")
    assert p["B300"] == "B200" and p["H800-SXM5-80GB"] == "H100-SXM5-80GB"
    assert "B200" not in p and "GB300" not in p
    assert all("extends" not in e for e in entries("profiles").values())
