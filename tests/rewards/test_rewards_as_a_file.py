"""verl loads the reward function as a file (`reward.custom_reward_function.path`), not as a package.

The file must work from a checkout that is not installed: the test copies the package's source
somewhere else, hides every installed `spacetools` from a fresh interpreter, and loads
`rewards/dispatch.py` by its path the way verl's `load_extern_object` does.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import spacetools

LOAD_AS_VERL_DOES = """
import importlib.util, json, sys
from pathlib import Path
# No spacetools but the checkout's: drop every path entry that holds one.
sys.path = [entry for entry in sys.path if not (Path(entry or ".") / "spacetools").is_dir()]
assert importlib.util.find_spec("spacetools") is None, "spacetools is still importable"
path = sys.argv[1]
spec = importlib.util.spec_from_file_location("custom_module", path)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
score = module.compute_score("spatialsim_blinkdepth", "<answer>(A)</answer>", "(A)", {"choices": ["x", "y"]})
print(json.dumps({"score": score, "package": sys.modules["spacetools"].__file__}))
"""


def test_dispatch_loads_as_a_file_from_an_uninstalled_checkout(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout" / "src" / "spacetools"
    source = Path(spacetools.__file__).parent
    shutil.copytree(source, checkout, ignore=shutil.ignore_patterns("__pycache__"))
    reward_file = checkout / "rewards" / "dispatch.py"

    result = subprocess.run(
        [sys.executable, "-I", "-c", LOAD_AS_VERL_DOES, str(reward_file)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert loaded["score"]["score"] == 1.0 and loaded["score"]["parse_ok"]
    assert Path(loaded["package"]).is_relative_to(checkout)
