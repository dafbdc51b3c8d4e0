# Names vulture cannot see being used. Generated with
#   .venv/bin/vulture agent_runner --min-confidence 60 --make-whitelist
# then grouped and commented by hand; regenerate with `make whitelist` when it goes stale.
# ruff: noqa

# click commands: registered by decorators and called by click, never by name.
init  # unused function (agent_runner/cli.py)
round_command  # unused function (agent_runner/cli.py)
peek  # unused function (agent_runner/cli.py)
doctor  # unused function (agent_runner/cli.py)
demo  # unused function (agent_runner/cli.py)
plugins_list  # unused function (agent_runner/cli.py)
plugins_pin  # unused function (agent_runner/cli.py)
rescue_apply  # unused function (agent_runner/cli.py)
rescue_branch  # unused function (agent_runner/cli.py)

schema_version  # unused variable (agent_runner/config.py): kept in the parsed config

# [budget] caps, read by name from supervisor/loop/budget.py's CAPS table.
max_cost_usd_per_day  # unused variable (agent_runner/config.py)
max_tokens_per_day  # unused variable (agent_runner/config.py)
max_rounds_per_hour  # unused variable (agent_runner/config.py)

# Public API for plugin authors and for the plugin layer: used by code outside this package.
PLUGIN  # unused variable (agent_runner/plugins/builtin/dirty.py): the builtin entry point's target
_.proceed  # unused method (agent_runner/plugins/__init__.py)
_.defer  # unused method (agent_runner/plugins/__init__.py)

# Report fields serialised with asdict()/to_dict() and read by peek, doctor and tests.
net  # unused variable (agent_runner/plugins/child/confine.py, sandbox.py)
scope  # unused variable (agent_runner/plugins/child/confine.py, sandbox.py)
syscall  # unused variable (agent_runner/plugins/parent/sandbox.py)
stderr_tail  # unused variable (agent_runner/plugins/parent/sandbox.py)
dirty_after  # unused variable (agent_runner/supervisor/dirty.py)

# Protocols the interpreter calls: importlib's loader protocol and the sys flag it reads.
_.dont_write_bytecode  # unused attribute (agent_runner/plugins/child/confine.py)
_.create_module  # unused method (agent_runner/plugins/child/runner.py)
_.exec_module  # unused method (agent_runner/plugins/child/runner.py)
_.get_source  # unused method (agent_runner/plugins/child/runner.py)

# Looked up by tests and docs: the seccomp table's per-syscall rule.
rule_for  # unused function (agent_runner/plugins/child/syscalls.py)

# --json schemas (agent_runner/observe/contracts.py): fields set by keyword and read through
# to_json, so vulture never sees them accessed by name.
started_at  # unused variable (agent_runner/observe/contracts.py)
ended_at  # unused variable (agent_runner/observe/contracts.py)
ts  # unused variable (agent_runner/observe/contracts.py)
last_hour  # unused variable (agent_runner/observe/contracts.py)
