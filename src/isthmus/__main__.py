from isthmus.cli.main import app

app(prog_name="isthmus")  # not `python -m isthmus` in usage lines and completion
