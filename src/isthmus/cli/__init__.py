"""The `isthmus` command line: one module per group of commands, all built the same way (cli/app.py).

Commands parse flags, wire components and print; the work lives in the capability packages.
"""

