"""The ground floor: what the tools, the Toolshed, the agent and the trainers share.

The tool framework (`definition`, what a call gives back `results`, its argument schemas
`argument_models`, `batched_methods`, the error vocabulary `errors`, the image wire format `imagecodec`,
`function_names`) and the loading of models from local folders (`loading`, `trainable`, `textonly`),
and starting worker processes without the user's main script (`mainscript`). It imports nothing else of
spacetools, so every layer may build on it.
"""
