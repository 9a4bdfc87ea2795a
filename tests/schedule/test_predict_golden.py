"""predict() returns bit for bit what it returned before the search's caching and restructuring: every catalog
scenario, every shipped corpus case and 240 plan variants that turn the searched knobs (golden/predict_cases.py).

The golden file was written from main's predict before any of that work; regenerate it only from an unmodified
predict (see the module docstring of golden/predict_cases.py)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "golden"))
import predict_cases as G  # noqa: E402


def test_predict_is_bit_for_bit_the_golden():
    golden = json.loads(G.GOLDEN.read_text())
    got = {cid: G.predict_record(scn) for cid, scn in G.cases(golden["variants"])}
    assert set(got) == set(golden["cases"]), "the catalog or the corpora changed: regenerate the golden file"
    moved = [(cid, golden["cases"][cid], rec) for cid, rec in got.items() if rec != golden["cases"][cid]]
    assert not moved, f"{len(moved)} of {len(got)} cases changed; first: {moved[0]}"
