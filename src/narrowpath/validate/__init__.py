"""validate stage — see DESIGN.md."""
