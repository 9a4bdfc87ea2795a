"""From the fiftieth session's independent review of input handling: fields that were accepted and then ignored or
mispriced, inputs that ended in a traceback, and messages that named the wrong thing. Every bad input is held to
the contract: exit status 2, one line naming the field, no traceback (tests.cli.one_line)."""
from __future__ import annotations

import pytest

from tests.cli.one_line import one_line_error

SYSTEM = """system:
  gpus_per_node: 8
  device: H100-SXM5-80GB
  host_bw_bytes_per_s_per_gpu: {host_bw}
  tiers:
  - {{name: scale_up, bw_bytes_per_s_per_gpu: 450e9, domain_size: 8{up}}}
  - {{name: scale_out, bw_bytes_per_s_per_gpu: 50e9{out}}}
model: llama3-8b
num_gpus: 16
plan: {{tp: 2, pp: 2, dp: 4, gbs: 64, zero_stage: 1, offload_layers: 4}}
"""


def _system_file(tmp_path, host_bw="0", up="", out=""):
    f = tmp_path / "s.yaml"
    f.write_text(SYSTEM.format(host_bw=host_bw, up=up, out=out))
    return str(f)


@pytest.mark.parametrize("value", ["-5e9", ".nan", ".inf"])
def test_host_bandwidth_must_be_finite_and_not_negative(tmp_path, capsys, value):
    """A negative host rate priced the offload reload as a gain (a faster step), NaN gave a NaN step time."""
    one_line_error(capsys, ["predict", _system_file(tmp_path, host_bw=value)],
                   "host_bw_bytes_per_s_per_gpu", "finite number >= 0")


def test_host_bandwidth_zero_still_means_unknown(tmp_path, capsys):
    from narrowpath.cli.main import main
    assert main(["predict", _system_file(tmp_path, host_bw="0")]) == 0


@pytest.mark.parametrize("up, out, where", [
    (", topology: full-mesh", "", "tier[scale_up].topology"),
    (", topology: torus", "", "tier[scale_up].topology"),
    ("", ", topology: rail-optimized", "tier[scale_out].topology"),
])
def test_an_unknown_topology_is_refused(tmp_path, capsys, up, out, where):
    """`full-mesh` was priced as a switched domain, a misspelt rail_optimized as a fat tree."""
    one_line_error(capsys, ["predict", _system_file(tmp_path, up=up, out=out)], where, "full_mesh", "fat_tree")


@pytest.mark.parametrize("up, where", [
    (", in_network_reduction: 'false'", "tier[scale_up].in_network_reduction"),
    (", in_network_reduction: 1", "tier[scale_up].in_network_reduction"),
    (", pcie: 'no'", "tier[scale_up].pcie"),
])
def test_tier_switches_must_be_booleans(tmp_path, capsys, up, where):
    """The string 'false' is truthy: it turned SHARP on."""
    one_line_error(capsys, ["predict", _system_file(tmp_path, up=up)], where, "must be true or false")
