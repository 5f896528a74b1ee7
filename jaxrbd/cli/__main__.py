"""`python -m jaxrbd.cli`: the same as the `jaxrbd` command."""

from .commands import main

main()
