"""``python -m tfdist`` runs the command line."""
from tfdist.cli.main import run

if __name__ == "__main__":
    run()
