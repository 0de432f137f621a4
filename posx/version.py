"""posx's version (also ``posx.__version__``), recorded in every ``run.json``."""

__version__ = "0.1.0"
