"""The trainer's flags -> Config: each flag overrides its one field of the preset (the
error-bound fields included), the presets carry the paper's tiers, --help names the entry
point."""

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from models.dlrm import flags, main
from models.dlrm.configs import Config, error_bound_presets, get_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KAGGLE_TIGHT = (2, 3, 9, 11, 15, 20, 23, 25)
KAGGLE_LOOSE = (8, 16, 19, 21, 22, 24)
TERABYTE_TIGHT = (0, 9, 10, 19, 20, 21, 22)
TERABYTE_LOOSE = (5, 8, 12, 15, 16, 17, 18, 24, 25)


def _config(*argv):
    return flags.config_from_flags(flags.build_parser().parse_args(list(argv)))


def _tiers(eb):
    return {t.name: (t.value, t.tables) for t in eb.tiers}


def test_no_flags_give_the_preset():
    for preset in ("kaggle", "terabyte", "tiny"):
        assert _config("--preset", preset) == get_config(preset)


def test_presets_carry_the_paper_tiers():
    kaggle = _config("--preset", "kaggle").error_bound
    assert _tiers(kaggle) == {"tighten": (0.01, KAGGLE_TIGHT), "loosen": (0.05, KAGGLE_LOOSE)}
    assert (kaggle.base, kaggle.schedule, kaggle.eb_constant) == (0.03, "log", 2.0)
    terabyte = _config("--preset", "terabyte").error_bound
    assert _tiers(terabyte) == {
        "tighten": (0.01, TERABYTE_TIGHT),
        "loosen": (0.05, TERABYTE_LOOSE),
    }
    assert dataclasses.replace(terabyte, tiers=kaggle.tiers) == kaggle  # same bounds, schedule
    assert _config("--preset", "tiny").error_bound == kaggle
    # --eb-preset starts from another setting.
    assert _config("--preset", "terabyte", "--eb-preset", "paper_kaggle").error_bound == kaggle
    uniform = _config("--eb-preset", "uniform").error_bound
    assert uniform.tiers == () and uniform.schedule == "linear" and uniform.base == 0.03


@pytest.mark.parametrize(
    "argv, field, value",
    [
        (["--eb-base", "0.02"], "base", 0.02),
        (["--eb-schedule", "step"], "schedule", "step"),
        (["--eb-constant", "3"], "eb_constant", 3.0),
        (["--eb-early-stage", "500"], "early_stage", 500),
        (["--eb-update-every", "7"], "update_every", 7),
        (["--eb-tier", "a=0.02:1,2", "--eb-tier", "b=0.04:5"], "tiers", None),
    ],
)
@pytest.mark.parametrize("preset", ["kaggle", "terabyte"])
def test_an_eb_flag_overrides_its_one_field(preset, argv, field, value):
    """`--eb-base 0.02` alone used to drop the tiers and the log schedule."""
    want = get_config(preset)
    got = _config("--preset", preset, *argv)
    if field == "tiers":
        assert _tiers(got.error_bound) == {"a": (0.02, (1, 2)), "b": (0.04, (5,))}
    else:
        assert getattr(got.error_bound, field) == value
    rest = {f.name for f in dataclasses.fields(got.error_bound)} - {field}
    for name in rest:  # every other error-bound field is the preset's
        assert getattr(got.error_bound, name) == getattr(want.error_bound, name), name
    assert dataclasses.replace(got, error_bound=want.error_bound) == want


def test_eb_config_file_overrides_its_fields_then_flags(tmp_path):
    path = tmp_path / "eb.json"
    path.write_text(json.dumps({"error_bound": {"schedule": "linear", "early_stage": 100}}))
    eb = _config("--eb-config", str(path), "--eb-early-stage", "50").error_bound
    want = dataclasses.replace(get_config("kaggle").error_bound, schedule="linear", early_stage=50)
    assert eb == want
    assert _config("--error-bound-config", str(path)).error_bound.early_stage == 100


def test_config_flags_override_their_field_only():
    cfg = _config("--preset", "tiny", "--steps", "7", "--lr", "0.5", "--devices", "4", "--resume")
    want = dataclasses.replace(
        get_config("tiny"), steps=7, learning_rate=0.5, devices_per_process=4, resume=True
    )
    assert cfg == want


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--eb-base", "-1"], "ErrorBoundConfig.base"),
        (["--eb-tier", "tight"], "--eb-tier must look like"),
        (["--eb-tier", "t=0.01:26"], "table ids must be in [0, 26)"),
        (["--eb-config", "eb.txt"], "must end in .json, .yaml or .yml"),
    ],
)
def test_bad_error_bound_flags_exit_2_with_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        main.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_config_checks_the_error_bound_table_count_and_serialises():
    cfg = get_config("tiny")
    json.dumps(cfg.to_dict())  # the metrics config record
    assert cfg.to_dict()["error_bound"]["tiers"]["tighten"]["tables"] == list(KAGGLE_TIGHT)
    small = dataclasses.replace(cfg, cardinalities=(10, 20, 30))
    with pytest.raises(ValueError, match="error_bound has 26 tables, the model has 3"):
        small.validate()
    dataclasses.replace(small, error_bound=error_bound_presets.preset("uniform", 3)).validate()


def test_help_names_the_entry_point_and_train_is_the_same_command():
    assert flags.build_parser().format_help().startswith("usage: python -m models.dlrm.main")
    outs = [
        subprocess.run(
            [sys.executable, "-m", mod, "--help"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        for mod in ("models.dlrm.main", "models.dlrm.train")
    ]
    assert all(o.returncode == 0 for o in outs), [o.stderr[-2000:] for o in outs]
    assert outs[0].stdout == outs[1].stdout
    assert "--eb-base" in outs[0].stdout and "--kill-at-step" not in outs[0].stdout
    # Flags that take the preset's value show it, not "None".
    text = " ".join(outs[0].stdout.split())
    assert "None" not in text
    assert (
        "--steps STEPS training steps (global batches) (preset: kaggle 500, terabyte 500, "
        "tiny 20, dcnv2 500, dcnv2_small 200)" in text
    )
    assert (
        "--eb-schedule {linear,log,step,constant} iteration-wise schedule (preset: 'log')" in text
    )


def test_every_config_field_is_a_flag_whose_help_is_its_comment():
    """The flags are generated from the Config fields: each field (but the error bound, set
    by the --eb-* flags) has a flag whose help is the first paragraph of its comment."""
    parser = flags.build_parser()
    by_dest = {}
    for a in parser._actions:  # the first flag of a dest (--resume, not --restart)
        if a.option_strings:
            by_dest.setdefault(a.dest, a)
    docs = flags.field_docs(Config)
    for f in dataclasses.fields(Config):
        if f.name in flags.NOT_FLAGS:
            continue
        action = by_dest[f.name]
        assert action.option_strings[0] == flags.flag_names(f.name)[0]
        section, comment = docs[f.name]
        assert section and len(comment) > 10, f.name
        assert action.help.startswith(flags._help_text(comment)[:40]), f.name
    text = " ".join(parser.format_help().split())
    # the comment's first paragraph is the help, the notes after a bare '#' line are not
    assert "--split-rows SPLIT_ROWS split tables with more rows than this row-wise over " \
        "devices (-1: a device's fair share; 0: never) (preset: -1)" in text  # fmt: skip
    assert "sharding.plan_tables" not in text and "0.70 MiB per step" not in text
    assert "--optimizer {sgd,adagrad} optimizer; sgd: the reference DLRM's" in text
    # argparse lists aliases as "--a A, --b A" up to Python 3.12 and as "--a, --b A" from 3.13
    assert (
        "--learning-rate LEARNING_RATE, --lr LEARNING_RATE peak learning rate" in text
        or "--learning-rate, --lr LEARNING_RATE peak learning rate" in text
    )
    # a flag name in a help is never broken at its hyphens (was "--max-ind- range")
    assert "rows of each categorical table before the --max-ind-range cap" in text


def test_a_field_without_a_comment_is_refused():
    @dataclasses.dataclass
    class Bare:
        # Documented.
        a: int = 1
        b: int = 2

    with pytest.raises(ValueError, match="Bare.b has no comment"):
        flags.field_docs(Bare)


def test_flags_of_fields_new_to_the_command_line():
    cfg = _config("--preset", "tiny", "--embedding-dim", "4", "--bottom-mlp", "16", "4",
                  "--top-mlp", "8", "1", "--max-checkpoints", "5", "--no-skip-bad-lines")  # fmt: skip
    want = dataclasses.replace(
        get_config("tiny"), embedding_dim=4, bottom_mlp=(16, 4), top_mlp=(8, 1),
        max_checkpoints=5, skip_bad_lines=False,
    )  # fmt: skip
    assert cfg == want and isinstance(cfg.bottom_mlp, tuple)
    with pytest.raises(ValueError, match="bottom_mlp must end in embedding_dim=4"):
        _config("--preset", "tiny", "--embedding-dim", "4")


def test_a_config_file_replaces_the_preset_and_flags_override_it(tmp_path, capsys):
    path = tmp_path / "mine.py"
    path.write_text(
        "import dataclasses\n"
        "from models.dlrm.configs import get_config as preset\n"
        "def get_config():\n"
        "    return dataclasses.replace(preset('tiny'), steps=33, seed=4)\n"
    )
    cfg = _config("--config", str(path), "--seed", "5")
    assert cfg == dataclasses.replace(get_config("tiny"), steps=33, seed=5)
    (tmp_path / "bad.py").write_text("def get_config():\n    return {'steps': 3}\n")
    for argv, message in (
        (["--config", str(tmp_path / "bad.py")], "get_config() must return a Config"),
        (["--config", str(tmp_path / "none.py")], "none.py: No such file"),
        (["--config", str(path), "--preset", "tiny"], "not allowed with argument --config"),
    ):
        with pytest.raises(SystemExit) as e:
            main.main(argv)
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, err


def test_the_exchange_config_is_built_once_from_the_config():
    import jax_lossy_comm as jlc
    from models.dlrm.pooled_all_to_all import exchange_config

    tiny = get_config("tiny")
    assert exchange_config(
        dataclasses.replace(tiny, compression="off"), topology="flat", min_error_bound=0.01
    ) is None  # fmt: skip
    frames = jlc.FrameCodec(mode="rel", codec="auto", min_error_bound=0.005)
    assert exchange_config(tiny, topology="hierarchical", min_error_bound=0.005) == (
        jlc.ExchangeConfig(frames, None, table_axis=1, path="auto", topology="hierarchical")
    )
    both = dataclasses.replace(tiny, codec="int8-rowwise", exchange_backward="compressed",
                               exchange_path="dense")  # fmt: skip
    assert exchange_config(both, topology="flat", min_error_bound=None) == jlc.ExchangeConfig(
        jlc.Int8Rowwise(), jlc.Int8Rowwise(), table_axis=1, path="dense"
    )
    with pytest.raises(ValueError, match="exchange_backward must be exact or compressed"):
        dataclasses.replace(tiny, exchange_backward="raw").validate()


def test_the_trainer_modules_import_one_way():
    """No import cycle in models/dlrm (main.py and train.py imported each other): every
    `from models... import` and `import models...`, at any depth of a module, is an edge."""
    import ast
    import glob

    edges = {}
    for path in glob.glob(os.path.join(ROOT, "models", "dlrm", "**", "*.py"), recursive=True):
        rel = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".").removesuffix(".__init__")
        deps = set()
        for node in ast.walk(ast.parse(open(path).read())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("models."):
                folder = os.path.join(ROOT, *node.module.split("."))
                subs = {a.name for a in node.names if os.path.isfile(f"{folder}/{a.name}.py")}
                deps |= {f"{node.module}.{s}" for s in subs}
                if len(subs) < len(node.names):
                    deps.add(node.module)
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name.startswith("models.")}
        edges[rel] = deps - {rel}
    assert "models.dlrm.train" in edges["models.dlrm.main"]

    def reaches(start, goal, seen):
        return any(d == goal or (d not in seen and not seen.add(d) and reaches(d, goal, seen))
                   for d in edges.get(start, ()))  # fmt: skip

    cyclic = sorted(m for m in edges if reaches(m, m, set()))
    assert cyclic == []
