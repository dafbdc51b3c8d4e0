"""Test agent: record each round's prompt, and edit the project between rounds.

Appends "<round>:<stdin>" lines to argv[1]. Round 1 rewrites the prompt and lowers the
round budget in agent-runner.toml; round 2 leaves a broken agent-runner.toml behind.
"""

import os
import sys
from pathlib import Path

if __name__ == "__main__":
    round_no = os.environ["AGENT_RUNNER_ROUND"]
    with open(sys.argv[1], "a") as record:
        record.write(f"{round_no}:{sys.stdin.read().strip()}\n")
    config = Path("agent-runner.toml")
    if round_no == "1":
        Path("prompts/main.md").write_text("second prompt\n")
        config.write_text(config.read_text().replace("round_budget_s = 30", "round_budget_s = 20"))
    elif round_no == "2":
        config.write_text(config.read_text() + "\nthis is [not toml\n")
