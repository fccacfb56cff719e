# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.stamp-install
DATA ?= $(if $(TFAMILY_DATA),$(TFAMILY_DATA),$(abspath ../shared/data))
export TFAMILY_DATA := $(DATA)

.PHONY: demo test test-slow test-cuda bench clean venv docs

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	# torch first and pinned: an unpinned torch pulls several GB of CUDA wheels.
	$(BIN)/pip install -q torch==2.13.0 -c constraints.txt
	$(BIN)/pip install -q -c constraints.txt -e '.[test,peers,docs,export,data]'
	# the compiled CPU kernels, once per machine (falls back to PyTorch with a note if it cannot)
	$(BIN)/python -c 'from tfamily.nn.kernels.native import main; main()'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/tfamily demo

test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup

# the documentation site (docs/, README.md as its front page, experiments/ as the lab) into site/;
# strict: a broken link or a missing page fails
docs: $(STAMP)
	$(BIN)/mkdocs build --strict

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

# The equivalence suite on a GPU (tests/cuda), with the machine's own python3 and torch from the source
# tree: no venv, no compiled CPU extension. Without a GPU (or a torch that sees one) it says so and passes.
test-cuda:
	@if $(PY) -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then \
	  PYTHONPATH=src$${PYTHONPATH:+:$$PYTHONPATH} TFAMILY_NATIVE=0 $(PY) -m pytest -q -p no:cacheprovider --durations=15 tests/cuda; \
	else echo "no CUDA device"; fi

clean:
	rm -rf $(VENV) runs site
