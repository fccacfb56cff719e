"""The bad-input catalogue over every command beside `tfamily train` (part 1: rl, eval, generate,
export, convert, compare, download, plot and the data tasks; part 2 in test_catalogue_tools.py:
repro, bench, arena). Each row is one kind of bad input answered by one line that holds every
listed word (the value and the fix) and by the exit status the README's table gives its kind."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from tfamily import cli
from tfamily.rl.toy import ID

RL = ["--env", ID, "--member", "lstm", "--n-envs", "4", "--rollout", "4", "--epochs", "1", "--minibatches", "2",
      "--d-model", "8", "--layers", "1", "--set", "eval_episodes=4", "--no-progress"]
LM = ["member=gpt", "model.d_model=32", "model.heads.n_heads=2", "model.depth.n_layers=1",
      "model.position.max_len=64", "data.seq_len=32", "train.batch_size=4", "train.eval_tokens=256",
      "train.progress=false", "train.tensorboard=false", "train.warmup=1"]
TASK = ["train", *LM, "data.corpus=null"]
# The exit statuses of README.md's "Errors and exit codes" table, by kind of failure.
EXIT = {"ok": 0, "bug": 1, "input": 2, "non-finite": 3, "download": 4, "interrupted": 130}


@dataclass
class Row:
    id: str
    argv: list
    words: list
    kind: str = "input"


def R(cmd: str, words: list, kind: str = "input") -> Row:  # noqa: N802 - a row, written as a table
    return Row(cmd, cmd.split(), words, kind)


@pytest.fixture(scope="module")
def paths(tmp_path_factory) -> dict:
    """One finished RL run, one LM run, one RL sweep and a few bad files, shared by every row."""
    d = tmp_path_factory.mktemp("every")
    assert cli.main(["rl", "train", *RL, "--steps", "32", "--out", str(d / "rl")]) == 0
    assert cli.main(["train", *LM, "--steps", "2", "--out", str(d / "lm")]) == 0
    assert cli.main(["rl", "sweep", "--envs", ID, "--members", "lstm", "--seeds", "1", "--steps", "32", *RL[4:],
                     "--out", str(d / "sweep")]) == 0
    for name, text in {"mamba": '{"model_type": "mamba"}', "noweights": '{"model_type": "gpt2"}',
                       "notjson": "not json"}.items():
        (d / "hf" / name).mkdir(parents=True)
        (d / "hf" / name / "config.json").write_text(text)
    (d / "empty").mkdir()
    (d / "file.txt").write_text("x")
    return {"d": str(d)}


ROWS = [
    # -- rl train ---------------------------------------------------------------------------
    R("rl train --steps 0", ["--steps 0", "fewer than one rollout", "--steps >= 16"]),
    R("rl train --n-envs 0", ["n_envs", ">= 1", "got 0"]),
    R("rl train --rollout 0", ["rollout", ">= 1", "got 0"]),
    R("rl train --epochs 0", ["epochs", ">= 1", "got 0"]),
    R("rl train --minibatches 0", ["minibatches", ">= 1", "got 0"]),
    R("rl train --minibatches 64", ["64 minibatches", "n_envs >= minibatches"]),
    R("rl train --env NoSuchEnv-v0", ["'NoSuchEnv-v0'", "e.g. popgym-RepeatFirstEasy-v0"]),
    R("rl train --member bert", ["'bert'", "no memory across steps", "gtrxl"]),
    R("rl train --member nosuch", ["'nosuch'", "valid members", "gtrxl"]),
    R("rl train --member gtrxl --gate-bias nan", ["gate_bias", "finite", "nan"]),
    R("rl train --set clip=-1", ["clip", ">= 0", "-1", "e.g. --set clip"]),
    R("rl train --set gamma=2", ["gamma", "[0.0, 1.0]", "got 2"]),
    R("rl train --set gamma=abc", ["gamma", "'abc'"]),
    R("rl train --set lam=-0.1", ["lam", "[0.0, 1.0]", "-0.1"]),
    R("rl train --set eval_episodes=0", ["eval_episodes", ">= 1", "got 0"]),
    R("rl train --set foo", ["'foo'", "not key=value", "--set ent_coef=0.01"]),
    R("rl train --set bogus=1", ["'bogus'", "valid:", "ent_coef"]),
    R("rl train --time soon", ["'soon'", "not a duration", "90s"]),
    R("rl train --d-model 0", ["--d-model", ">= 1", "got 0"]),
    R("rl train --member gtrxl --heads 3", ["d_model=8", "n_heads=3", "divisible"]),
    R("rl train --lr 1e38", ["non-finite", "--lr"], kind="non-finite"),
    R("train train.lr=1e38 data.task=copy", ["non-finite", "lr"], kind="non-finite"),
    R("rl train --steps many", ["--steps", "'many'", "--help"]),
    R("rl train --resume {d}/nothing", ["{d}/nothing", "does not exist"]),
    R("rl train --resume {d}/lm", ["{d}/lm", "not a run of `tfamily rl train`", "tfamily train --resume"]),
    R("rl train --out {d}/rl", ["{d}/rl", "already has checkpoints", "--resume"]),
    R("rl train --env x", ["needs --env ENV and --steps N", "--resume DIR"]),
    # -- rl eval ----------------------------------------------------------------------------
    R("rl eval {d}/nothing", ["{d}/nothing", "does not exist"]),
    R("rl eval {d}/rl --episodes 0", ["--episodes", ">= 1", "got 0"]),
    R("rl eval {d}/rl --episodes -1", ["--episodes", "got -1"]),
    R("rl eval {d}/rl --seed -1", ["--seed", ">= 0", "got -1", "leave it out"]),
    R("rl eval {d}/lm", ["{d}/lm", "not a run of `tfamily rl train`", "tfamily eval"]),
    R("rl eval {d}/rl --episodes x", ["--episodes", "'x'", "--help"]),
    # -- rl sweep ---------------------------------------------------------------------------
    R("rl sweep --steps 32 --out {d}/sw --seeds 0", ["--seeds", ">= 1", "got 0"]),
    R("rl sweep --steps 0 --out {d}/sw", ["--steps 0", "fewer than one rollout", "--steps >= 2048"]),
    R("rl sweep --steps 4096 --out {d}/sw --shard 3/2 --dry-run", ["--shard 3/2", "0 <= i < n", "--shard 0/2"]),
    R("rl sweep --steps 4096 --out {d}/sw --shard x --dry-run", ["--shard x", "e.g. --shard 0/2"]),
    R("rl sweep --steps 4096 --out {d}/sw --members nosuch --dry-run", ["'nosuch'", "valid members"]),
    R("rl sweep --steps 4096 --out {d}/sw --envs NoSuchEnv-v0 --dry-run", ["'NoSuchEnv-v0'", "e.g."]),
    R("rl sweep --steps 4096 --out {d}/sw --set bogus=1 --dry-run", ["'bogus'", "valid:"]),
    R("rl sweep --steps 4096 --out {d}/sw --members gtrxl:foo=1 --dry-run", ["'gtrxl:foo=1'", "gate_bias=X"]),
    R("rl sweep --steps 4096 --out {d}/sw --members gtrxl:gate_bias=x --dry-run", ["gate_bias 'x'",
                                                                                    "not a number"]),
    R("rl sweep --steps 4096 --out {d}/sw --lr nan --dry-run", ["--lr", "finite", "nan"]),
    R("rl sweep --steps 4096 --out {d}/sw --threads -2", ["--threads", "got -2", ">= 1"]),
    R("rl sweep --steps 4096 --out {d}/sweep --dry-run", ["planned with other settings", "n_envs"]),
    R("rl sweep --steps 32 --out {d}/file.txt --dry-run", ["--out {d}/file.txt", "is a file", "directory"]),
    R("rl sweep --steps 32 --out {d}/file.txt", ["--out {d}/file.txt", "is a file", "directory"]),
    # -- rl table ---------------------------------------------------------------------------
    R("rl table {d}/nothing", ["{d}/nothing", "does not exist", "tfamily rl sweep"]),
    R("rl table {d}/lm", ["no runs under {d}/lm", "tfamily rl sweep"]),
    R("rl table {d}/sweep --baselines {d}/nothing.json", ["{d}/nothing.json", "not a file", "leave the flag out"]),
    R("rl table {d}/sweep --baselines {d}/lm/result.json", ["result.json", "baselines must be", "mmer_mean"]),
    R("rl table {d}/sweep --reach nan", ["--reach", "finite", "nan", "e.g. --reach"]),
    R("rl table {d}/sweep --out {d}/file.txt", ["File exists", "{d}/file.txt", "pick another"]),
    # -- eval -------------------------------------------------------------------------------
    R("eval {d}/nothing", ["{d}/nothing", "does not exist"]),
    R("eval {d}/lm --max-tokens 0", ["--max-tokens", ">= 1", "got 0"]),
    R("eval {d}/lm --batch-size 0", ["--batch-size", ">= 1", "got 0"]),
    R("eval {d}/lm --mem-len -1", ["--mem-len", ">= 0", "got -1"]),
    R("eval {d}/lm --data-dir {d}/nothing", ["--data-dir {d}/nothing", "does not exist", "drop --data-dir"]),
    R("eval {d}/lm --device tpu", ["'tpu'", "valid: auto, cpu, cuda"]),
    R("eval {d}/lm --split train", ["'train'", "'val', 'test'", "--help"]),
    R("eval {d}/rl", ["{d}/rl", "a policy of `tfamily rl train`", "tfamily rl eval RUN"]),
    R("eval {d}/empty", ["{d}/empty", "no complete checkpoint", "checkpoints/step-*"]),
    # -- generate ---------------------------------------------------------------------------
    R("generate {d}/nothing", ["{d}/nothing", "does not exist"]),
    R("generate {d}/lm --tokens -3", ["--tokens", ">= 0", "got -3"]),
    R("generate {d}/lm --temperature -1", ["temperature", "> 0", "-1.0", "greedy"]),
    R("generate {d}/lm --temperature nan", ["temperature", "nan"]),
    R("generate {d}/lm --top-k 0", ["top_k", ">= 1", "got 0"]),
    R("generate {d}/lm --top-p 1.5", ["top_p", "(0, 1]", "1.5"]),
    R("generate {d}/lm --top-p nan", ["top_p", "nan"]),
    R("generate {d}/lm --prompt € --tokens 2", ["'€'", "not in this 65-character vocabulary"]),
    R("generate {d}/lm --device tpu", ["'tpu'", "valid: auto, cpu, cuda"]),
    R("generate {d}/rl", ["a policy of `tfamily rl train`", "tfamily rl eval RUN"]),
    R("generate {d}/lm --tokens x", ["--tokens", "'x'", "--help"]),
    R("generate {d}/lm --tokens 1000000000", ["--tokens", "<= 1000000", "1000000000", "in parts", "--prompt"]),
    # -- export, convert, compare, download --------------------------------------------------
    R("export {d}/lm --format bogus --out {d}/x.onnx", ["'bogus'", "onnx, torchscript, pt2, hf"]),
    R("export {d}/nothing --format onnx --out {d}/x.onnx", ["{d}/nothing", "does not exist"]),
    R("export {d}/empty --format onnx --out {d}/x.onnx", ["{d}/empty", "no complete checkpoint"]),
    R("export {d}/rl --format onnx --out {d}/x.onnx", ["a policy of `tfamily rl train`", "tfamily rl eval"]),
    R("export {d}/lm --format hf --out {d}/lm", ["--out {d}/lm", "not an empty directory", "new directory"]),
    R("convert {d}/nothing --out {d}/cv", ["{d}/nothing", "does not exist", "save_pretrained"]),
    R("convert {d}/empty --out {d}/cv", ["{d}/empty", "no config.json", "save_pretrained"]),
    R("convert {d}/hf/mamba --out {d}/cv", ["'mamba'", "supported: gpt2"]),
    R("convert {d}/hf/noweights --out {d}/cv", ["no model.safetensors", "copy the weights file"]),
    R("convert {d}/hf/notjson --out {d}/cv", ["config.json is not valid JSON", "re-save"]),
    R("convert {d}/hf/noweights --out {d}/cv --seq-len 0", ["--seq-len", ">= 1", "got 0"]),
    R("convert {d}/hf/noweights --out {d}/lm", ["--out {d}/lm", "not empty", "pick a new directory"]),
    R("convert {d}/hf/noweights --out {d}/cv --dtype fp8", ["'fp8'", "'fp32', 'bf16'"]),
    R("compare {d}/nothing", ["{d}/nothing", "does not exist", "their --out"]),
    R("compare {d}/lm/checkpoints", ["no result.json", "not a finished run", "--resume"]),
    R("download nosuch", ["'nosuch'", "choose from", "tinyshakespeare"]),
    R("download tinyshakespeare --data-dir {d}/file.txt", ["{d}/file.txt", "is a file", "--data-dir DIR"]),
    # -- plot -------------------------------------------------------------------------------
    R("plot curves {d}/nothing --out {d}/p.png", ["{d}/nothing", "does not exist", "their --out"]),
    R("plot curves {d}/empty --out {d}/p.png", ["{d}/empty", "no result.json"]),
    R("plot spans {d}/nothing --out {d}/p.png", ["{d}/nothing", "does not exist"]),
    R("plot spans {d}/empty --out {d}/p.png", ["{d}/empty", "no complete checkpoint"]),
    R("plot spans {d}/lm --out {d}/p.png", ["gpt, pattern 'causal'", "no adaptive spans", "adaptive_span"]),
    R("plot spans {d}/rl --out {d}/p.png", ["a policy of `tfamily rl train`"]),
    R("plot ponder {d}/lm --text hi --out {d}/p.png", ["depth 'stack'", "no dynamic halting", "universal_act"]),
    R("plot ponder {d}/nothing --text hi --out {d}/p.png", ["{d}/nothing", "does not exist"]),
    R("plot alignment {d}/lm --text hi --out {d}/p.png", ["(gpt)", "no recurrent attention", "luong_attention"]),
    R("plot alignment {d}/nothing --text hi --out {d}/p.png", ["{d}/nothing", "does not exist"]),
    R("plot nosuch", ["'nosuch'", "curves", "--help"]),
    # -- data tasks (data.task=..., data.task_params.*) --------------------------------------
    R("train data.task=nosuch", ["'nosuch'", "valid tasks", "copy"]),
    R("train data.task=copy data.task_params.bogus=1", ["copy", "['bogus']", "valid parameters", "max_len"]),
    R("train data.task=copy data.task_params.max_len=0", ["copy: max_len", ">= 1", "got 0"]),
    R("train data.task=copy data.task_params.max_len=nan", ["copy: max_len", "got nan"]),
    R("train data.task=copy data.task_params.max_len=1.5", ["copy: max_len", "got 1.5"]),
    R("train data.task=copy data.task_params.n_symbols=true", ["n_symbols", "got True"]),
    R("train data.task=copy data.task_params.min_len=9 data.task_params.max_len=3",
      ["min_len=9", "max_len=3", "make min_len <= max_len"]),
    R("train data.task=copy data.task_params=[1,2]", ["data.task_params", "mapping", "[1, 2]"]),
    R("train data.task=listops data.task_params.max_depth=-1", ["listops: max_depth", "got -1"]),
    R("train data.task=listops data.task_params.min_length=100 data.task_params.max_length=10",
      ["min_length=100", "max_length=10"]),
    R("train data.task=associative_recall data.task_params.n_keys=2 data.task_params.n_pairs=8",
      ["n_pairs=8", "n_keys=2", "raise n_keys"]),
    R("train data.task=addition data.task_params.n_digits=0", ["addition: n_digits", "got 0"]),
    R("train data.task=parity data.task_params.max_len=abc", ["parity: max_len", "'abc'"]),
    R("train data.task=parity data.task_params.min_len=0", ["parity: min_len", "got 0"]),
    R("train data.task=duplicate data.task_params.n_symbols=0", ["duplicate: n_symbols", "got 0"]),
    R("train data.task=reverse data.task_params.n_symbols=1000000000", ["cannot fit", "vocab_size=1000000002"]),
    R("train data.task=copy data.task_params.max_len=100000", ["model.position.max_len=64", "200000",
                                                                "lower data.seq_len"]),
    R("train data.task=reverse_dictionary", ["reverse_dictionary", "seq2seq", "luong_attention"]),
    R("train member=luong_attention data.task=reverse_dictionary data.task_params.path={d}/nothing.gz",
      ["{d}/nothing.gz", "not a file", "gcide.txt.gz"]),
    R("train member=luong_attention data.task=copy data.task_params.bogus=1", ["['bogus']", "valid parameters"]),
    R("train member=lstm_seq2seq data.corpus=tinyshakespeare", ["'tinyshakespeare'", "set data.task to copy",
                                                                "span_corruption"]),
]


def _argv(row: Row, d: str, tmp_path: Path) -> list[str]:
    argv = [a.replace("{d}", d) for a in row.argv]
    if argv[0] == "train":  # a data-task row: the tiny LM, no corpus unless the row names one
        member = [a for a in argv if a.startswith("member=")]
        base = ([a for a in TASK if not a.startswith("member=")] + member) if member else TASK
        argv = [*base, *[a for a in argv[1:] if a not in member], "--steps", "1", "--out", str(tmp_path / "o")]
        if any(a.startswith("data.corpus=") and a != "data.corpus=null" for a in argv):
            argv.remove("data.corpus=null")
    elif argv[:2] == ["rl", "train"] and "--resume" not in argv:
        rest = argv[2:]
        argv = ["rl", "train", *RL, *(["--steps", "32"] if "--steps" not in rest and rest[:2] != ["--env", "x"]
                                      else []), *rest]
        if "--out" not in rest:
            argv += ["--out", str(tmp_path / "o")]
    elif argv[:2] == ["rl", "sweep"]:
        extra = [] if "--envs" in argv else ["--envs", ID]
        extra += [] if "--members" in argv else ["--members", "lstm"]
        argv = ["rl", "sweep", *extra, *argv[2:]]
    return argv


def run_row(row: Row, argv: list[str], capsys) -> str:
    """Run ``argv`` in this process; the exit status must be the one of the row's kind and stderr's
    last line a one-line error holding every word of the row."""
    capsys.readouterr()
    try:
        rc = cli.main(argv)
    except SystemExit as e:  # argparse's usage errors
        rc = e.code
    err = capsys.readouterr().err.strip()
    assert rc == EXIT[row.kind], (rc, err)
    lines = [ln for ln in err.splitlines() if not ln.startswith(("tfamily train: note:", "W1", "W0"))]
    assert "Traceback" not in err and lines, err
    last = lines[-1]
    said = "stopped" if row.kind == "non-finite" else "error"
    assert re.match(rf"tfamily( [a-z-]+)*: {said}: ", last), err
    assert len(lines) <= (4 if row.kind == "non-finite" else 2), err  # start-up and progress lines
    return last


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_every_command_refuses_bad_input_in_one_line_naming_the_value_and_the_fix(row, paths, tmp_path, capsys):
    last = run_row(row, _argv(row, paths["d"], tmp_path), capsys)
    for w in row.words:
        w = w.replace("{d}", paths["d"])
        assert w in last, (w, last)


def test_the_readme_table_is_the_exit_statuses_the_rows_assert():
    """README.md's "Errors and exit codes" table lists exactly EXIT's statuses, and every row's kind
    is one of them."""
    text = (Path(__file__).parents[1] / "README.md").read_text()
    part = text.split("## Errors and exit codes\n", 1)[1].split("\n#", 1)[0]
    table = {int(m.group(1)) for m in re.finditer(r"^\| `?(\d+)`? \|", part, re.M)}
    assert table == set(EXIT.values()), table
    assert {r.kind for r in ROWS} <= set(EXIT)
    assert json.dumps(EXIT)  # the mapping is data, printed in failures


def test_a_failed_download_is_status_4_and_a_bad_data_dir_2(tmp_path, monkeypatch, capsys):
    import urllib.error

    from tfamily.data import download

    def offline(*a, **k):
        raise urllib.error.URLError("network is unreachable")
    monkeypatch.setattr(download, "download", offline)
    assert cli.main(["download", "tinyshakespeare", "--data-dir", str(tmp_path)]) == EXIT["download"]
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "network is unreachable" in err and "retry later" in err, err
