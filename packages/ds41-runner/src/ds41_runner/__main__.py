"""`python -m ds41_runner ...` = `ds41-run ...`."""

from .app import main

if __name__ == "__main__":
    main()
