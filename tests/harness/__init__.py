"""What test modules share: polling, in-process servers, backends and ports.

Test modules import helpers from here, never from each other (pytest fixtures stay in the
`conftest.py` files, where pytest finds them).
"""
