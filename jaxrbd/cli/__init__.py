"""The `jaxrbd` command line (demo, reproduce, fit, bench) and its benchmarks; the library never imports it."""

from .commands import main as main
