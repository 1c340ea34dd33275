"""Robot front: the original's robot HTTP API over any `RobotBackend` (:mod:`.server`)."""
