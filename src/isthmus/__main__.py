from isthmus.cli.main import app

app()
