"""workload stage — see DESIGN.md."""
