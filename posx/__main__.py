"""``python -m posx`` (also what ``torchrun -m posx`` runs)."""

from posx.cli import main

if __name__ == "__main__":
    main()
