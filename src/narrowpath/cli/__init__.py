"""cli: the `narrowpath` command. Thin: parse, build, run, report."""
