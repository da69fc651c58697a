"""chronod: the chrono scheduler daemon and its pure core."""

__version__ = "0.1.0"
