"""Numbers as a user reads them: decimal units (GB = 1e9 B, DESIGN.md), three significant figures, by hand."""
from __future__ import annotations

from narrowpath.report.console import human_bytes, human_time, table


def test_bytes_and_times_by_hand():
    """80e9 B is '80.00 GB' (decimal); 2^30 B (1 GiB) is 1.07 GB; 17.5224 ms; 8.5 µs; 1.5 s."""
    assert (human_bytes(80e9), human_bytes(2**30), human_bytes(512)) == ("80.00 GB", "1.07 GB", "512 B")
    assert (human_time(0.0175224), human_time(8.5e-6), human_time(1.5)) == ("17.52 ms", "8.5 us", "1.500 s")


def test_table_cells_by_hand():
    """Floats: three decimals below 100 (trailing zeros dropped), one above, 3 significant figures beyond 1e5 or
    below 1e-3; first column left-aligned, the others right-aligned, a dashed rule under the header."""
    out = table(["what", "value (s)"], [["step", 1.5], ["bubble", 123.456], ["tiny", 2.5e-6], ["big", 4.2e6]])
    assert out.splitlines() == ["  what    value (s)", "  ------  ---------", "  step          1.5",
                                "  bubble      123.5", "  tiny      2.5e-06", "  big       4.2e+06"]
