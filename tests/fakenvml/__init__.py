"""The fake NVIDIA driver: fakenvml.c and the Python side that drives it (scenario.py)."""
