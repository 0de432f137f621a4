"""posx: does this positional encoding still work past the length it was trained on?"""

__version__ = "0.1.0"
