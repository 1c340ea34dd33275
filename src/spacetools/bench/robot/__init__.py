"""The robot benchmark: seeded pick, relational pick and pick & place tasks, checks and evaluation."""
