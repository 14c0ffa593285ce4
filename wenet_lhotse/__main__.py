"""``python -m wenet_lhotse`` runs the CLI."""

from wenet_lhotse.cli import main

if __name__ == "__main__":
    main()
