"""Descriptive GPU names resolve to the one catalog device they state, or are refused with the reason
(catalog.gpu_names; shared/validation/README.md: "GPU names are descriptive … resolve them to catalog devices")."""
from __future__ import annotations

import pytest

from narrowpath.catalog import store
from narrowpath.catalog.gpu_names import parse_gpu_name, resolve_gpu_name
from narrowpath.catalog.resolve import system_for_hardware
from narrowpath.errors import CatalogError


@pytest.mark.parametrize("name, device", [
    ("NVIDIA H100 80GB HBM3", "H100-SXM5-80GB"),  # nvidia-smi's name
    ("h100-sxm5-80gb", "H100-SXM5-80GB"),
    ("H100-SXM-80GB-HBM3", "H100-SXM5-80GB"),
    ("H100 SXM5 96GB HBM3", "H100-SXM5-96GB"),
    ("H100-SXM5-96GB-HBM2e", "H100-SXM5-96GB-HBM2e"),  # the memory type picks between the two 96 GB boards
    ("A100-80GB-SXM", "A100-SXM4-80GB"),
    ("A100 SXM4 40GB", "A100-SXM4-40GB"),
    ("H200-141GB-HBM3e", "H200-SXM-141GB"),
    ("H800-SXM-80GB", "H800-SXM5-80GB"),
    ("B200-SXM-192GB", "B200"),  # 192 GB raw, 180 GB usable: one board (179 GiB in the catalog)
    ("NVIDIA B200 SXM 192GB", "B200"),
    ("GB200-NVL72-192GB", "GB200"),
    ("gb300_nvl72_288gb", "GB300"),
    ("H100-SXM-NVLink-80GB", "H100-SXM5-80GB"),  # NVLink is not the NVL (PCIe) board
    ("MI300X-192GB", "MI300X"),
    ("RTX PRO 6000 Blackwell Server Edition", "RTX-PRO-6000-Blackwell-Server"),
])
def test_a_descriptive_name_is_the_device_it_states(name, device):
    assert resolve_gpu_name(name, store.entries("devices")) == (device, "")
    assert store.canonical_id("devices", name) == device
    assert system_for_hardware(name, gpus_per_node=8).device.name == device


@pytest.mark.parametrize("name, device", [
    ("NVIDIA H100 PCIe", "H100-PCIe-80GB"),  # nvidia-smi's name of the PCIe card (114 SMs, 350 W)
    ("H100 PCIe 80GB", "H100-PCIe-80GB"),
    ("NVIDIA H100 80GB HBM2e", "H100-PCIe-80GB"),  # only the PCIe card has HBM2e at 80 GB
    ("H100 80GB", "H100-SXM5-80GB"),  # no form stated: the SXM board, not the PCIe card of the same size
    ("H100 NVL", "H100-NVL-94GB"),
    ("H100 94GB", "H100-NVL-94GB"),  # only the NVL card has 94 GB
    ("H200 NVL 141GB", "H200-NVL-141GB"),
    ("H200 141GB", "H200-SXM-141GB"),  # no form stated: the SXM board
    ("GH200 96GB HBM3 (480GB LPDDR5X)", "GH200-96GB"),  # TensorRT-LLM's performance overview spells it so
    ("GH200-144GB-HBM3e", "GH200-144GB"),
    ("NVIDIA GH200 480GB", "GH200-96GB"),  # nvidia-smi's name of the 96 GB superchip (480 GB: the Grace LPDDR5X)
    ("NVIDIA L40S PCIe 48GB", "L40S"),
    ("NVIDIA L40S", "L40S"),
    ("NVIDIA H20 96GB", "H20-96GB"),  # a chip of its own, not a neighbour of H100/H200
    ("A800-SXM4-80GB", "A800-SXM4-80GB"),
    ("Tesla V100-SXM2-32GB", "V100-SXM2-32GB"),
    ("V100 16GB", "V100-SXM2-16GB"),
    ("AMD Instinct MI325X", "MI325X"),
    ("MI355X 288GB", "MI355X"),
    ("NVIDIA B300 270GB", "B300"),  # NVIDIA's Blackwell Ultra datasheet: HGX B300, 270 GB (268.6 GiB, nvidia-smi)
])
def test_the_added_boards_resolve_by_their_published_names(name, device):
    """The boards a published run may name beyond the shipped corpora resolve to their own entries, each with its
    home system (a bridged PCIe board's node is its NVLink group)."""
    assert resolve_gpu_name(name, store.entries("devices")) == (device, "")
    s = system_for_hardware(name)
    assert s.device.name == device and s.name == store.entries("devices")[device]["default_system"]


def test_a_bridged_board_refuses_a_node_larger_than_its_nvlink_group():
    """H100 NVL cards are bridged in pairs without a switch: eight per node cannot be one NVLink domain, and the
    refusal names the field; a switched PCIe board (L40S) and an NVSwitch board take the stated node size."""
    from narrowpath.errors import SpecError
    with pytest.raises(SpecError) as exc:
        system_for_hardware("H100 NVL", gpus_per_node=8)
    assert str(exc.value).startswith("hardware.gpus_per_node: 8 exceeds the H100-NVL-94GB's directly linked group of 2")
    assert system_for_hardware("H100 NVL", gpus_per_node=2).scale_up_domain == 2
    assert system_for_hardware("L40S", gpus_per_node=4).scale_up_domain == 4
    assert system_for_hardware("MI300X", gpus_per_node=4).scale_up_domain == 4  # a mesh may be used in part
    with pytest.raises(SpecError, match="hardware.scale_up_gpus: 8 exceeds"):  # nor grown by a stated domain
        system_for_hardware("H100 NVL", gpus_per_node=2, scale_up_gpus=8)
    nvl2 = system_for_hardware("GH200 NVL2 144GB")  # NVIDIA's two-superchip node: its name states the domain
    assert (nvl2.device.name, nvl2.gpus_per_node, nvl2.scale_up_domain) == ("GH200-144GB", 2, 2)


@pytest.mark.parametrize("name, why", [
    ("V100-PCIE-32GB", "PCIE board is not the catalog's SXM"),  # other clocks and power than the SXM2 board
    ("A800 PCIe 80GB", "PCIE board is not the catalog's SXM"),
    ("H100 SXM 94GB", "no H100 device has 94 GB"),  # the H100 NVL's capacity: an SXM name is never the NVL card
    ("H100 SXM 80GB HBM2e", "no H100 device has HBM2E memory"),  # HBM2e at 80 GB is the PCIe card's memory
    ("H100-SXM5-64GB", "no H100 device has 64 GB"),
    ("B300-SXM-256GB", "no B300 device has 256 GB"),  # a size no source in the catalog gives
    ("GH200 120GB", "no GH200 device has 120 GB"),
    ("L40S SXM", "the catalog has no SXM/server L40S device"),  # the L40S is a PCIe card only
    ("MI250X", "names no GPU chip"),  # a chip the catalog lacks is not a neighbour of MI300X
    ("A10G", "names no GPU chip"),
    ("B200 HBM3", "no B200 device has HBM3 memory"),
    ("B200A", "names no GPU chip"),  # another chip, not B200
    ("RTX PRO 6000D", "names no GPU chip"),
    ("RTX PRO 6000 Blackwell Max-Q Workstation Edition", "WORKSTATION board is not the catalog's"),
    ("DGX-H100", "matches H100-SXM5-80GB, H100-SXM5-96GB: state the memory"),
    ("A100", "matches A100-SXM4-40GB, A100-SXM4-80GB"),
    ("TPU-v5p", "names no GPU chip"),
])
def test_a_name_that_states_no_one_device_is_refused_with_why(name, why):
    dev, reason = resolve_gpu_name(name, store.entries("devices"))
    assert dev is None and why in reason
    with pytest.raises(CatalogError) as exc:
        store.device(name)
    assert str(exc.value).startswith("unknown device '") and why.split(":")[0] in str(exc.value)


def test_the_parse_reads_chip_form_memory_and_type():
    assert parse_gpu_name("NVIDIA GB200 NVL72 186 GB") == parse_gpu_name("GB200-NVL72-186GB")
    g = parse_gpu_name("H100 NVL 94GB HBM3")
    assert (g.family, g.form, g.memory_gb, g.memory_type) == ("H100", "nvl", 94.0, "HBM3")
    g = parse_gpu_name("B200")  # GB200 is not read as B200, nor H20 in H200
    assert g.family == "B200" and parse_gpu_name("GB200").family == "GB200"
    assert parse_gpu_name("H200-SXM-141GB").family == "H200" and parse_gpu_name("H20-96GB").family == "H20"


def test_every_catalog_id_and_alias_resolves_to_itself():
    """The parse agrees with the catalog's own names: no id or alias reads as another device."""
    devs = store.entries("devices")
    for eid, entry in devs.items():
        for name in (eid, *(entry.get("aliases") or ())):
            got, why = resolve_gpu_name(name, devs)
            assert got in (eid, None), (name, got)
            if got is None:  # only a family-less or memory-less name may stay open (exact lookup finds it)
                assert "state the memory" in why or "names no GPU chip" in why, (name, why)


def test_a_system_flag_takes_a_gpu_by_any_name(capsys):
    """`--system` takes a system id or a GPU (its home system) by id or descriptive name, in predict, serve and
    collective; a board the catalog lacks is one line with the reason; a mistyped system keeps its nearest ids."""
    import json
    from narrowpath.cli.main import main
    from tests.cli.one_line import one_line_error
    assert main(["predict", "--model", "llama3-8b", "--system", "NVIDIA H100 80GB HBM3", "--gpus", "8", "--gbs",
                 "64", "--zero", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "dgx-h100" in json.dumps(out) and "H100-SXM5-80GB" in json.dumps(out)
    assert main(["collective", "--system", "B200-SXM-192GB", "--gpus", "8", "-b", "1G", "-e", "1G", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["busbw_bytes_per_s"] > 0
    assert main(["serve", "--model", "llama3-8b", "--system", "h200 sxm 141gb", "--offline", "--input-len", "64",
                 "--output-len", "16", "--num-requests", "20", "--json"]) == 0
    capsys.readouterr()
    one_line_error(capsys, ["predict", "--model", "llama3-8b", "--system", "V100 PCIe 32GB", "--gpus", "8"],
                   "unknown system 'V100 PCIe 32GB'", "PCIE board is not the catalog's SXM")
    one_line_error(capsys, ["predict", "--model", "llama3-8b", "--system", "dgx-h10", "--gpus", "8"],
                   "unknown system 'dgx-h10'; nearest: dgx-h100")


def test_an_nvlink_domain_in_the_name_shapes_the_system():
    """`GB200 NVL36` and `GB200 NVL4` are GB200 boards in a 36- and a 4-GPU NVLink domain, not the home NVL72; a
    stated `scale_up_gpus` still wins, and a name with the home domain leaves the system as it is."""
    def domain(name, **kw):
        s = system_for_hardware(name, gpus_per_node=4, **kw)
        return next(t.domain_size for t in s.tiers if t.name == "scale_up")
    assert domain("GB200-NVL36") == 36 and domain("GB200 NVL4") == 4 and domain("GB200-NVL72-186GB") == 72
    assert domain("GB200-NVL36", scale_up_gpus=72) == 72
    assert system_for_hardware("GB200-NVL72").name == "gb200-nvl72"


def test_an_unqualified_gh200_is_the_original_superchip():
    """NVIDIA names the HBM3e GH200 by its 144 GB (or HBM3e) every time; a bare `GH200` is the 96 GB HBM3 part (an
    exact alias: the descriptive reading alone would leave the two open)."""
    assert store.canonical_id("devices", "GH200") == "GH200-96GB"
    assert system_for_hardware("GH200").device.name == "GH200-96GB"
    assert system_for_hardware("GH200 144GB").device.name == "GH200-144GB"
