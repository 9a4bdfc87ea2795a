"""cost stage — see DESIGN.md."""
