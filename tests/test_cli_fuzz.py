"""Fuzzing past the spec: random arguments to `tfamily train` and `tfamily rl train`, random config
files (types, nesting, YAML aliases) and checkpoint directories with one file mutated. Every case
ends in a run or in a clean refusal (one error line, exit status 2), never in a traceback; a
refused checkpoint leaves its run directory byte for byte as it was. Derandomized, in-process."""
from __future__ import annotations

import hashlib
import json
import math
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tfamily import cli
from tfamily.rl.toy import ID
from tfamily.train import checkpoint

LM = ["member=gpt", "model.d_model=16", "model.heads.n_heads=2", "model.depth.n_layers=1",
      "model.position.max_len=32", "data.seq_len=16", "train.batch_size=2", "train.eval_tokens=64",
      "train.progress=false", "train.tensorboard=false", "train.warmup=1", "train.precision=fp32",
      "train.threads=1", "train.ckpt_every=null"]
RL = ["--env", ID, "--member", "lstm", "--n-envs", "4", "--rollout", "4", "--epochs", "1", "--minibatches", "2",
      "--d-model", "8", "--layers", "1", "--set", "eval_episodes=2", "--no-progress"]
FUZZ = settings(derandomize=True, deadline=None, database=None, print_blob=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

# Values of every type and range: small, negative, huge, NaN/inf, strings, nesting, nothing.
WEIRD = st.one_of(
    st.integers(-3, 64), st.sampled_from([2**31, 10**9, 2**63, -(10**12)]),
    st.sampled_from(["nan", "inf", "-inf", "1e308", "1e-320", "0.0", "-0.5", "3e-3"]),
    st.sampled_from(["true", "null", "''", "abc", "[1, 2]", "{a: 1}", "[[[[]]]]", "5m", "auto", "é"]),
)
TRAIN_KEYS = ["model.d_model", "model.heads.n_heads", "model.heads.n_kv_heads", "model.depth.n_layers",
              "model.ff.d_ff", "model.position.max_len", "model.dropout", "data.seq_len", "data.vocab",
              "train.batch_size", "train.accum", "train.lr", "train.warmup", "train.weight_decay",
              "train.grad_clip", "train.seed", "train.eval_tokens", "train.log_every", "train.ckpt_every",
              "train.time_budget", "train.min_lr_ratio", "train.betas", "train.eps", "train.keep", "member",
              "model.pattern.name", "model.pattern.params.window", "model.state.mem_len", "data.corpus",
              "data.task", "data.task_params.max_len", "train.optimizer", "nosuch.key", "train.nosuch", "model"]
RL_FLAGS = ["--lr", "--n-envs", "--rollout", "--epochs", "--minibatches", "--d-model", "--layers", "--heads",
            "--mem-len", "--seed", "--ckpt-every", "--gate-bias", "--time-budget", "--member", "--env"]
RL_SETS = ["clip", "vf_coef", "ent_coef", "gamma", "lam", "eval_episodes", "nosuch"]


def outcome(argv: list[str], capsys) -> int:
    """Run ``argv``; a refusal must be one `tfamily ...: error:` line (after a start-up line at most)."""
    capsys.readouterr()
    try:
        rc = cli.main(argv)
    except SystemExit as e:  # argparse: one line too (cli.Parser)
        rc = e.code
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    assert rc in (0, 2, 3), (rc, err)
    if rc != 0:
        lines = [ln for ln in err.strip().splitlines() if ": note:" not in ln]
        assert lines and lines[-1].startswith("tfamily ") and (": error: " in lines[-1] or ": stopped: " in
                                                                lines[-1]), err
        assert sum(": error: " in ln for ln in lines) <= 1, err
    return rc


@settings(FUZZ, max_examples=30)
@given(pairs=st.lists(st.tuples(st.sampled_from(TRAIN_KEYS), WEIRD), min_size=1, max_size=3))
def test_train_arguments_run_or_are_refused_in_one_line(pairs, tmp_path_factory, capsys):
    out = tmp_path_factory.mktemp("fz")
    outcome(["train", *LM, *[f"{k}={v}" for k, v in pairs], "--steps", "1", "--out", str(out / "r")], capsys)


@settings(FUZZ, max_examples=20)
@given(flags=st.lists(st.tuples(st.sampled_from(RL_FLAGS), WEIRD), max_size=3),
       sets=st.lists(st.tuples(st.sampled_from(RL_SETS), WEIRD), max_size=2),
       steps=st.sampled_from(["32", "32", "32", "16", "0", "x"]))
def test_rl_train_arguments_run_or_are_refused_in_one_line(flags, sets, steps, tmp_path_factory, capsys):
    out = tmp_path_factory.mktemp("fz")
    argv = ["rl", "train", *RL, *[a for f, v in flags for a in (f, str(v))], "--steps", steps,
            *(["--set", *[f"{k}={v}" for k, v in sets]] if sets else []), "--out", str(out / "r")]
    outcome(argv, capsys)


def _yaml(value) -> str:
    return json.dumps(value)  # JSON is YAML: flow style, any nesting


SECTION = st.sampled_from(["model", "data", "train", "member", "size", "nosuch", "heads", "d_model", "lr", "task"])
LEAF = st.one_of(st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=4),
                 st.booleans(), st.none())
TREE = st.recursive(LEAF, lambda kids: st.one_of(st.lists(kids, max_size=3),
                                                 st.dictionaries(SECTION, kids, max_size=3)), max_leaves=12)


@settings(FUZZ, max_examples=20)
@given(tree=st.dictionaries(SECTION, TREE, max_size=4), alias=st.booleans(), kind=st.sampled_from(["yaml", "toml"]))
def test_config_files_run_or_are_refused_in_one_line(tree, alias, kind, tmp_path_factory, capsys):
    out = tmp_path_factory.mktemp("fz")
    path = out / f"c.{kind}"
    if kind == "toml":
        lines = [f"{k} = {json.dumps(v)}" for k, v in tree.items() if isinstance(v, (int, str, bool))
                 and not isinstance(v, float)]
        path.write_text("\n".join(lines) + "\n[train]\nlr = " + json.dumps(tree.get("lr", 1)) + "\n")
    elif alias:  # one anchor, used by every section
        path.write_text(f"base: &b {_yaml(tree)}\n" + "".join(f"{k}: *b\n" for k in tree))
    else:
        path.write_text("".join(f"{k}: {_yaml(v)}\n" for k, v in tree.items()))
    outcome(["train", "-c", str(path), *LM, "--steps", "1", "--out", str(out / "r")], capsys)


# -- checkpoint directories with one file mutated --------------------------------------------------
@pytest.fixture(scope="module")
def lm_run(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("ckfuzz") / "run"
    assert cli.main(["train", *LM[:-1], "train.ckpt_every=1", "--steps", "2", "--out", str(d)]) == 0
    return d


def _snapshot(run: Path) -> dict:
    return {str(p.relative_to(run)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(run.rglob("*")) if p.is_file()}


def _mutate(path: Path, how: str, where: float, value) -> None:
    data = path.read_bytes()
    if how == "delete":
        path.unlink()
    elif how == "truncate":
        path.write_bytes(data[: int(len(data) * where)])
    elif how == "flip":
        i = min(int(len(data) * where), len(data) - 1)
        path.write_bytes(data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:])
    else:  # edit JSON: one top-level key gets a value of another type, or goes
        try:
            obj = json.loads(data)
        except ValueError:
            return _mutate(path, "flip", where, value)
        if isinstance(obj, dict) and obj:
            key = sorted(obj)[min(int(len(obj) * where), len(obj) - 1)]
            if value is None:
                del obj[key]
            else:
                obj[key] = value
        path.write_text(json.dumps(obj))


@settings(FUZZ, max_examples=30)
@given(pick=st.floats(0, 0.999), how=st.sampled_from(["delete", "truncate", "flip", "json"]),
       where=st.floats(0, 0.999), value=st.one_of(st.none(), st.integers(-5, 5), st.just("x"), st.just([]),
                                                   st.just({}), st.just(math.inf)),
       command=st.sampled_from(["eval", "generate", "resume"]))
def test_a_mutated_checkpoint_is_refused_in_one_line_and_nothing_is_overwritten(pick, how, where, value, command,
                                                                               lm_run, tmp_path_factory, capsys):
    run = tmp_path_factory.mktemp("ck") / "run"
    shutil.copytree(lm_run, run)
    files = sorted(p for p in (run / "checkpoints").rglob("*") if p.is_file())
    files = [p for p in files if "step-00000002" in str(p)] + [run / "config.json"] * (how == "json")
    target = files[int(len(files) * pick)] if files else run / "config.json"
    if target.exists():
        _mutate(target, how if how != "json" or target.suffix == ".json" else "flip", where,
                float("inf") if value == math.inf else value)
    before = _snapshot(run)
    argv = {"eval": ["eval", str(run), "--max-tokens", "32"],
            "generate": ["generate", str(run), "--tokens", "4"],
            "resume": ["train", "--resume", str(run), "--steps", "3"]}[command]
    rc = outcome(argv, capsys)
    if command != "resume" or rc != 0:  # a refused resume, eval and generate write nothing
        assert _snapshot(run) == before
    else:  # a resume ran from a checkpoint that verified (a corrupt newer one is skipped and trained
        # again); the good one is never changed, and the run's newest checkpoint verifies
        after = _snapshot(run)
        assert all(after.get(k, v) == v for k, v in before.items() if "step-00000001" in k)
        checkpoint.read_meta(checkpoint.resolve(run), verify=True)


# The bounded loader (base/textload.py) under random files: any nesting, any JSON type where a field is
# read, random bytes. Each reader returns its value or raises one ValueError line naming the file,
# never a RecursionError, KeyError, AttributeError or TypeError.
JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=6))
JSON_TREE = st.recursive(JSON_LEAF, lambda c: st.one_of(st.lists(c, max_size=3),
                                                        st.dictionaries(st.text(max_size=6), c, max_size=3)),
                         max_leaves=10)
FIELDS = ["model_type", "n_layer", "n_embd", "n_head", "vocab_size", "weight_map", "task", "member", "seed", "env",
          "label", "steps", "tokens", "train", "data", "text", "label", "length", "batch_size", "rope_parameters"]


def _readers():
    from tfamily import compare
    from tfamily.base import textload
    from tfamily.arena import files
    from tfamily.pretrained import spec_of
    from tfamily.pretrained.load import read_tensors
    from tfamily.rl.table import runs
    from tfamily.train.config import read_file
    from tfamily.train.tasks.labelled import read_rows
    return {  # file name inside the case's directory -> what reads it
        "a.json": textload.read_json, "a.yaml": read_file, "a.toml": read_file, "a.jsonl": read_rows,
        "a.csv": read_rows, "hf/config.json": lambda p: spec_of(p.parent),
        "hf/model.safetensors.index.json": lambda p: read_tensors(p.parent),
        "cell/cell.json": files.read_cell, "cell/plan.json": files.read_plan, "speed.json": files.read_speed,
        "sweep/env/gru-s0/plan.json": lambda p: runs(p.parents[2]),
        "sweep/env/gru-s0/result.json": lambda p: runs(p.parents[2]), "run/result.json": lambda p: compare.load(p.parent),
    }


@settings(FUZZ, max_examples=120)
@given(tree=JSON_TREE, fields=st.dictionaries(st.sampled_from(FIELDS), JSON_TREE, max_size=4),
       depth=st.sampled_from([0, 1, 70, 3000]), raw=st.one_of(st.none(), st.binary(max_size=24)),
       name=st.sampled_from(sorted(_readers())))
def test_every_reader_returns_or_refuses_a_random_file_in_one_line(tree, fields, depth, raw, name, tmp_path_factory):
    path = tmp_path_factory.mktemp("read") / name
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {**tree, "model_type": "gpt2", **fields} if isinstance(tree, dict) else tree
    text = "[" * depth + json.dumps(doc) + "]" * depth
    if name.endswith(".jsonl"):
        text = json.dumps({"text": "a", "label": "x"}) + "\n" + text
    if name == "sweep/env/gru-s0/result.json":
        (path.parent / "plan.json").write_text(json.dumps({"env": "e", "label": "l", "seed": 0, "steps": 1}))
    path.write_bytes(raw if raw is not None else text.encode())
    try:
        _readers()[name](path)
    except ValueError as e:  # the one refusal: a line naming the file
        msg = str(e)
        assert "\n" not in msg and len(msg) < 1000 and path.name in msg, msg
