"""The V2 robot tools and the robot backends behind them (simulation in-process, or HTTP)."""

from spacetools.tools.robot.backend import (
    DepthFrame,
    MotionOutcome,
    RobotBackend,
    RobotMotionError,
    RobotUnavailableError,
)
from spacetools.tools.robot.tool import RobotTool

__all__ = [
    "DepthFrame",
    "MotionOutcome",
    "RobotBackend",
    "RobotMotionError",
    "RobotTool",
    "RobotUnavailableError",
]
