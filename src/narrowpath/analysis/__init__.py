"""analysis stage — see DESIGN.md."""
