"""`python -m jaxrbd.cli`: the same as the `jaxrbd` command."""

from .commands import main

if __name__ == "__main__":
    main()
