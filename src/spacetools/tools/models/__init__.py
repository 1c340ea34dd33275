"""Real perception backends: the V1 tools answered by models loaded from local folders.

Each module is one backend family (depth, segmentation, pointing, grasps). Its tool classes keep the
simulated tools' names, methods, arguments, variables and result texts by subclassing them and
replacing only the step that reads the world (`_estimate`, `_segment`, `_points`, `_search`).
torch and transformers are imported inside `setup()`, so listing schemas stays cheap.
"""
