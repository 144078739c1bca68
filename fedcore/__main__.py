"""``python -m fedcore`` is the ``fedcore`` command (useful where the script is not on PATH)."""
import sys

from fedcore.cli import console

if __name__ == "__main__":
    sys.exit(console())
