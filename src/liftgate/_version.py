"""The package version, in a module of its own so any stage can import it without ``liftgate``'s API."""

__version__ = "0.1.0"
