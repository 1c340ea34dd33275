"""Fronts for other frameworks: verl (a `BaseTool` adapter and its config export) and MCP (a server).

The top layer beside `cli`: it may import every layer, and only `cli` imports it.
"""
