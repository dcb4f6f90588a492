# The ktune version (meson.build's project version; tests/test_graph.py checks they agree).
__version__ = "0.1.0"
