"""DIRL training: teacher traces, multi-turn tool SFT and GRPO with live tools (one file per stage)."""
