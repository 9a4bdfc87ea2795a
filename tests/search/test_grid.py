"""A sweep grid is validated before any cell runs: every mistake is one SpecError naming its field; a valid grid
lists one cell per combination, each with a key that names what decides its result."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from narrowpath.errors import NarrowpathError, SpecError
from narrowpath.search.grid import MAX_CELLS, grid_from_dict, load_grid

GOOD = {"systems": ["dgx-a100", "dgx-h100"], "models": ["gpt-1.7b"], "num_gpus": [1, 8], "gbs": [8, 16],
        "objective": "time"}


@dataclass(frozen=True)
class TC:
    name: str
    change: dict[str, Any]
    field: str
    message: str


CASES = [
    TC("unknown key", {"system": ["dgx-a100"]}, "grid.system", "unknown key"),
    TC("missing key", {"gbs": None}, "grid.gbs", "is required"),
    TC("unknown system", {"systems": ["dgx-a100", "dgx-a10"]}, "grid.systems[1]", "nearest: dgx-a100"),
    TC("unknown model", {"models": ["llama3-9b"]}, "grid.models[0]", "unknown model"),
    TC("system not a name", {"systems": [3]}, "grid.systems[0]", "catalog id or a file name"),
    TC("empty list", {"num_gpus": []}, "grid.num_gpus", "at least one value"),
    TC("zero GPUs", {"num_gpus": [8, 0]}, "grid.num_gpus[1]", "must be >= 1"),
    TC("too many GPUs", {"num_gpus": [1 << 30]}, "grid.num_gpus[0]", "must be <= 16,777,216"),
    TC("gbs not an integer", {"gbs": [8.5]}, "grid.gbs[0]", "must be an integer"),
    TC("gbs absurd", {"gbs": [10 ** 47]}, "grid.gbs[0]", "must be <="),
    TC("bool is not a count", {"gbs": [True]}, "grid.gbs[0]", "must be an integer"),
    TC("nested list", {"num_gpus": [[8]]}, "grid.num_gpus[0]", "single value"),
    TC("repeat", {"num_gpus": [8, 8]}, "grid.num_gpus[1]", "listed twice"),
    TC("objective", {"objective": "speed"}, "grid.objective", "one of time, energy, memory"),
    TC("objective in a list", {"objective": ["time", "cost"]}, "grid.objective[1]", "one of time, energy, memory"),
    TC("too many cells", {"num_gpus": list(range(1, 400)), "gbs": list(range(1, 400))}, "grid",
       f"at most {MAX_CELLS:,}"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_bad_grid_is_one_error_naming_the_field(case):
    data = {**GOOD, **case.change}
    data = {k: v for k, v in data.items() if v is not None}
    with pytest.raises(SpecError) as err:
        grid_from_dict(data)
    msg = str(err.value)
    assert msg.startswith(case.field + ":") and case.message in msg and "\n" not in msg


def test_not_a_mapping():
    with pytest.raises(SpecError, match="^grid: must be a mapping"):
        grid_from_dict([1, 2])


def test_cells_are_the_product_in_a_fixed_order():
    grid = grid_from_dict({**GOOD, "objective": ["time", "energy"]})
    cells = grid.cells()
    assert len(cells) == grid.num_cells == 2 * 1 * 2 * 2 * 2
    assert [(c.system_label, c.num_gpus, c.gbs, c.objective) for c in cells[:3]] == [
        ("dgx-a100", 1, 8, "time"), ("dgx-a100", 1, 8, "energy"), ("dgx-a100", 1, 16, "time")]
    assert len({c.key for c in cells}) == len(cells)
    assert cells[0].system.name == "dgx-a100" and cells[0].model.name == "gpt-1.7b"


def test_scalars_count_as_lists_of_one():
    grid = grid_from_dict({**GOOD, "systems": "dgx-h100", "num_gpus": 8})
    assert grid.num_cells == 2 and grid.num_gpus == (8,)


def test_files_are_relative_to_the_grid(tmp_path):
    """A system file and a HuggingFace config.json next to the grid are resolved from the grid's folder."""
    from importlib import resources
    entry = next(s for s in yaml.safe_load(resources.files("narrowpath.catalog").joinpath("systems.yaml")
                                           .read_text())["systems"] if s["id"] == "dgx-h100")
    entry.pop("id")
    (tmp_path / "sys").mkdir()
    (tmp_path / "sys" / "mine.yaml").write_text(yaml.safe_dump(entry))
    (tmp_path / "tiny.json").write_text('{"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 512, '
                                        '"num_attention_heads": 8, "num_key_value_heads": 8, '
                                        '"intermediate_size": 1024, "vocab_size": 32000, '
                                        '"max_position_embeddings": 1024}')
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump({**GOOD, "systems": ["sys/mine.yaml"], "models": [
        {"hf_config": "tiny.json", "seq_len": 512}, {"hf_config": "tiny.json", "seq_len": 1024, "name": "tiny-1k"}]}))
    grid = load_grid(tmp_path / "grid.yaml")
    cell = grid.cells()[0]
    assert cell.system.name == "mine" and cell.system.device.name == "H100-SXM5-80GB"
    assert cell.model.layers == 4 and cell.model.seq_len == 512 and cell.system_label == "sys/mine.yaml"
    assert [m for m, _ in grid.models] == ["tiny.json@512", "tiny-1k"]
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump({**GOOD, "models": ["tiny.json"]}))
    with pytest.raises(SpecError, match=r"^grid.models\[0\]: model.seq_len: .*seq_len: N"):
        load_grid(tmp_path / "bad.yaml")


def test_missing_files_name_the_field(tmp_path):
    with pytest.raises(NarrowpathError, match="no such grid file"):
        load_grid(tmp_path / "nope.yaml")
    (tmp_path / "g.yaml").write_text(yaml.safe_dump({**GOOD, "systems": ["gone.yaml"]}))
    with pytest.raises(SpecError, match=r"^grid.systems\[0\]: .*gone.yaml: no such system file"):
        load_grid(tmp_path / "g.yaml")
