"""trace stage — see DESIGN.md."""
