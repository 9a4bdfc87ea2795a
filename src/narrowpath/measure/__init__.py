"""measure stage — see DESIGN.md."""
