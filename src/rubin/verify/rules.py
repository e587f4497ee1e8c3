"""Rollback rules: typed, with shipped defaults (``rules_default.yaml``) and a strict loader."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rubin.errors import load_mapping, load_yaml_text, validation_error

DEFAULTS = Path(__file__).with_name("rules_default.yaml")


class Rules(BaseModel):
    model_config = ConfigDict(extra="forbid")
    alpha: float = Field(gt=0, lt=0.5, description="significance level of the t-tests together")
    t_test: Literal["student", "welch"] = Field(description="student (one pooled variance) or welch")
    metric: str = Field(description="eval metric to compare: auto, accuracy, eval_loss, or any logged eval key")
    smoothing_steps: int = Field(ge=1, description="trailing mean window on loss curves")
    curve_tolerance_pct: float = Field(gt=0, description="curve method: max relative loss difference per step, %")
    envelope_margin_pct: float = Field(ge=0, description="widen the baseline envelope by this share of the loss, %")
    envelope_widen_by_range: float = Field(ge=0, description="also widen the envelope by this multiple of its min-max width")
    envelope_max_outside_pct: float = Field(ge=0, le=100, description="share of steps the new curve may spend outside, %")
    final_metric_max_change_pct: float = Field(ge=0, description="largest significant change of the final metric, %")
    final_eval_loss_max_change_pct: float = Field(ge=0, description="largest significant change of the final eval loss, %")
    steps_to_target_max_change_pct: float = Field(ge=0, description="largest significant change of steps-to-target, %")
    target: Union[Literal["auto"], float] = Field(description="metric value for steps-to-target, or auto")
    max_nan_events: int = Field(ge=0)
    max_rollback_events: int = Field(ge=0)
    min_speedup: Optional[float] = Field(gt=0, description="smallest new/baseline samples/s; null: not checked")


def defaults_text() -> str:
    return DEFAULTS.read_text()


def load_rules(path=None) -> Rules:
    data = load_yaml_text(defaults_text(), str(DEFAULTS))
    where = "shipped rules"
    if path is not None:
        user = load_mapping(path, "rules file", "start from the defaults: rubin verify --print-rules > rules.yaml")
        data.update(user)
        where = f"rules file {str(path)!r}"
    try:
        return Rules.model_validate(data)
    except ValidationError as err:
        raise validation_error(err, Rules, where=where, fix="see rubin verify --print-rules") from None
