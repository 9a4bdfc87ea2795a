from narrowpath.cli.main import entry

if __name__ == "__main__":  # `python -m narrowpath`; the guard keeps spawned worker processes (sweep) from re-running it
    entry()
