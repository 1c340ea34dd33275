"""The `spacetools` command: one typer app with a sub-app per concept."""

import typer

from spacetools.cli import data, demo, eval, robot, serve, tools

app = typer.Typer(
    name="spacetools",
    help="Tool-augmented spatial reasoning: simulated data, Toolshed tools, evaluation.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(data.app, name="data", help="Generate and inspect SpatialSim benchmark sets.")
app.add_typer(tools.app, name="tools", help="List, describe and run Toolshed tools.")
app.add_typer(eval.app, name="eval", help="Evaluate a policy on benchmarks with live tools.")
app.add_typer(robot.app, name="robot", help="The simulated robot: its HTTP API and the robot benchmark.")
app.command(name="demo")(demo.demo)
app.command(name="serve", help="Serve a tool set over HTTP.")(serve.serve)

if __name__ == "__main__":
    app()
