from perfmodel.cli import app

app()
