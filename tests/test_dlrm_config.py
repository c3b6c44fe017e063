"""The trainer's flags -> Config: each flag overrides its one field of the preset (the
error-bound fields included), the presets carry the paper's tiers, --help names the entry
point."""

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from models.dlrm import error_bounds, flags, main
from models.dlrm.configs import get_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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
    """Issue 13 item 8: `--eb-base 0.02` alone used to drop the tiers and the log schedule."""
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
    dataclasses.replace(small, error_bound=error_bounds.preset("uniform", 3)).validate()


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
    # Flags that take the preset's value show it, not "None" (issue 13 item 13).
    text = " ".join(outs[0].stdout.split())
    assert "None" not in text
    assert (
        "--steps STEPS training steps (global batches) (preset: kaggle 500, terabyte 500, "
        "tiny 20, dcnv2 500, dcnv2_small 200)" in text
    )
    assert (
        "--eb-schedule {linear,log,step,constant} iteration-wise schedule (preset: 'log')" in text
    )
