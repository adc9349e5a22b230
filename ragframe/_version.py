"""The version, in one place that every layer may import (the package root imports it too)."""

__version__ = "0.1.0"
