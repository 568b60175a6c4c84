"""The errors every layer raises for bad input. Each is a `ValueError` whose message is one line
naming the option or file and the bad value; the CLI prints it and exits 2."""


class ProjectionError(ValueError):
    """A request that cannot be projected: a bad option, a layout engines cannot run, a missing file."""
