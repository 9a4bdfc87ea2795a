"""schedule stage — see DESIGN.md."""
