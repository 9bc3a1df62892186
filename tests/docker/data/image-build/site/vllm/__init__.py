"""A small stand-in for the installed vllm package, for servekit's image build tests."""

__version__ = "0.25.1"
