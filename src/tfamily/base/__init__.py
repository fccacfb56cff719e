"""The base layer: number, option and dict helpers, bounded file reading, atomic writes,
plotting setup and Ctrl-C handling. Imports nothing above ``registry.py``."""
