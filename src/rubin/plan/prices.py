"""The user's price list (YAML). rubin ships no prices as facts: every number comes from this file.

```yaml
currency: USD
as_of: 2026-12-01          # when the prices were read
source: "where they were read"
instances:
  - name: 8xH100 on-demand/spot
    gpus: 8                 # GPUs per instance (node)
    gpu: H100-SXM           # a key of the spec catalog
    on_demand_per_hour: 98.0
    spot_per_hour: 35.0     # omit (or null) when the instance has no spot offer
    notice_s: 30            # eviction notice: Azure/GCP spot 30 s, AWS 120 s
    hazard_per_hour: 0.05   # evictions per node-hour (your measured rate)
    provision_s: 900        # from request to a node running your job
    restart_s: 300          # after an eviction: reload the checkpoint, warm up
```
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rubin.errors import UsageError, bad_value, load_mapping, validation_error


class Instance(BaseModel):
    # inf and nan are refused: an infinite price or hazard would rank or poison every option
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str = Field(description="what you call this option")
    gpus: int = Field(gt=0, description="GPUs per instance (node)")
    gpu: str = Field(description="GPU type, a key of the spec catalog (rubin bench --list-gpus)")
    on_demand_per_hour: float = Field(gt=0, description="on-demand price per instance-hour")
    spot_per_hour: Optional[float] = Field(None, gt=0, description="spot price per instance-hour (none: no spot offer)")
    notice_s: float = Field(0.0, ge=0, description="eviction notice in seconds")
    hazard_per_hour: Optional[float] = Field(None, gt=0, description="spot evictions per node-hour")
    provision_s: float = Field(0.0, ge=0, description="seconds from request to a running job")
    restart_s: float = Field(0.0, ge=0, description="seconds to resume after an eviction (reload, warm-up)")


class PriceList(BaseModel):
    model_config = ConfigDict(extra="forbid")

    currency: str = Field("USD", description="currency of every price")
    as_of: Optional[str] = Field(None, description="date the prices were read")
    source: Optional[str] = Field(None, description="where the prices were read")
    instances: list[Instance] = Field(min_length=1, description="the options to compare")


def load(path: str | Path) -> PriceList:
    data = load_mapping(Path(path), "price file", "copy examples/prices.example.yaml and edit it")
    if not data:
        raise bad_value("prices", str(path), "a mapping with an 'instances' list", "see examples/prices.example.yaml")
    try:
        prices = PriceList.model_validate(data)
    except ValidationError as err:
        raise validation_error(err, PriceList, where=str(path),
                               fix="fix the price file (prices and hazards must be positive and finite)") from None
    _check(prices, str(path))
    return prices


def _check(prices: PriceList, path: str) -> None:
    from rubin.platform import specs

    names = [i.name for i in prices.instances]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise UsageError(f"{path}: instance names must be unique, {sorted(dup)[0]!r} appears twice; rename one")
    for i, inst in enumerate(prices.instances):
        try:
            inst.gpu = specs.get(inst.gpu).key
        except UsageError as err:
            raise UsageError(f"{path}: instances.{i}.gpu: {err}") from None
        if inst.spot_per_hour is not None and inst.hazard_per_hour is None:
            raise UsageError(f"{path}: instances.{i}.hazard_per_hour is missing for a spot offer: give the "
                             "evictions per node-hour you measured (e.g. 0.02), or drop spot_per_hour")
