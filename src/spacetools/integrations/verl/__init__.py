"""verl integration: a `BaseTool` per Toolshed tool (:mod:`.tool`) and the trainer config (:mod:`.export`).

`spacetools.integrations.verl.tool` imports without verl; its tool class works only inside verl.
"""
