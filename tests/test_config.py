import os
import subprocess
import sys
from pathlib import Path

import pytest

from jouled.config import Config, bundled_tasks
from jouled.errors import ConfigError


def test_environment_is_read_in_one_place(tmp_path: Path) -> None:
    env = {"JOULED_HOME": str(tmp_path / "home"), "JOULED_ACTIVE_WATTS": "42.5"}
    config = Config.from_env(env)
    assert config.data_dir == (tmp_path / "home").resolve()
    assert config.active_watts == 42.5
    assert config.task_dirs == (bundled_tasks(),)
    assert config.listen_address == f"unix:{config.data_dir / 'jouled.sock'}"


def test_overrides_win_and_none_means_unset(tmp_path: Path) -> None:
    config = Config.from_env({}, data_dir=tmp_path, energy="estimator", listen=None)
    assert config.energy == "estimator"
    assert config.listen == ()


@pytest.mark.parametrize(
    ("env", "overrides", "message"),
    [
        ({"JOULED_ACTIVE_WATTS": "lots"}, {}, "JOULED_ACTIVE_WATTS='lots' is not a number"),
        ({"JOULED_ACTIVE_WATTS": "nan"}, {}, "JOULED_ACTIVE_WATTS='nan' is not a finite number"),
        ({"JOULED_WATTS_PER_CORE": "-inf"}, {}, "JOULED_WATTS_PER_CORE='-inf' is not a finite"),
        ({"JOULED_ACTIVE_WATTS": "-3"}, {}, "JOULED_ACTIVE_WATTS must be a positive number"),
        ({"JOULED_WATTS_PER_CORE": "0"}, {}, "JOULED_WATTS_PER_CORE must be a positive number"),
        ({}, {"energy": "magic"}, "--energy 'magic' is not one of"),
        ({}, {"attribution": "fair"}, "attribution 'fair'"),
        ({}, {"calibrate_seconds": -1}, "--calibrate-seconds"),
        ({}, {"memory_modules": "sometimes"}, "--memory-modules 'sometimes' is not one of"),
    ],
)
def test_bad_values_say_what_is_wrong(env: dict, overrides: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        Config.from_env(env, **overrides)


@pytest.mark.parametrize("value", ["lots", "-3", "nan", ""])
def test_a_bad_active_watts_ends_meter_probe_with_a_message_not_a_traceback(
    tmp_path: Path, value: str
) -> None:
    env = {**os.environ, "JOULED_HOME": str(tmp_path), "JOULED_ACTIVE_WATTS": value}
    jouled = str(Path(sys.executable).with_name("jouled"))
    done = subprocess.run(
        [jouled, "meter", "probe", "--powercap-root", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if value == "":  # empty means unset: the default applies
        assert done.returncode == 0, done.stderr
        return
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("jouled: JOULED_ACTIVE_WATTS")
