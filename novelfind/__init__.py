"""novelfind: find the most novel photos in a large library."""

__version__ = "0.1.0"
