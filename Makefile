# The README's two commands: `make demo` and `make test`. Everything else is a helper.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Most tests wait on real processes, so a few workers per core shorten the run.
TEST_WORKERS ?= 2
# Confinement tests fail instead of skipping wherever the kernel offers Landlock.
LANDLOCK_ABI := $(shell $(PYTHON) -c 'import ctypes; print(max(ctypes.CDLL(None, use_errno=True).syscall(444, None, 0, 1), 0))' 2>/dev/null || echo 0)
ifneq ($(LANDLOCK_ABI),0)
export AGENT_RUNNER_REQUIRE_CONFINEMENT ?= 1
endif

.PHONY: demo test lint typecheck unit docs clean bench whitelist record confined-clis

$(BIN)/python:
	$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11) and "agent-runner needs Python >= 3.11")'
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[sandbox,dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/agent-runner demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/vulture agent_runner .vulture-whitelist.py --min-confidence 60
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest tests/unit -q

test: lint typecheck
	@echo "Landlock ABI $(LANDLOCK_ABI); AGENT_RUNNER_REQUIRE_CONFINEMENT=$${AGENT_RUNNER_REQUIRE_CONFINEMENT:-0}"
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile

docs: $(STAMP)
	$(BIN)/python -m agent_runner.events > docs/events.md
	$(BIN)/python -m agent_runner.config > docs/configuration.md
	$(BIN)/python -m agent_runner.observe.contracts > docs/json.md

# Every figure in one table, beside the targets (docs/performance.md); a few minutes.
bench: $(STAMP)
	$(BIN)/python benchmarks/run.py

# Re-record tests/fixtures/transcripts/real/ from the pinned CLIs (root, loopback only; slow).
record: $(STAMP)
	$(BIN)/python scripts/record-transcripts record

# Each pinned real CLI's success case under [agent] confine = "workdir" (root, loopback only).
confined-clis: $(STAMP)
	$(BIN)/python scripts/record-transcripts confined

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis

whitelist: $(STAMP)
	$(BIN)/vulture agent_runner --min-confidence 60 --make-whitelist
