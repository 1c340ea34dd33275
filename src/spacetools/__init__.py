"""spacetools: tool-augmented spatial reasoning for vision-language models."""

__version__ = "0.1.0"
