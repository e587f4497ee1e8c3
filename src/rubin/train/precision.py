"""fp32, bf16 autocast, and fp16 autocast with GradScaler.

The order under fp16 is the one a widely read tutorial gets wrong: ``scaler.unscale_`` first,
then clip the (now true-scale) gradients, then ``scaler.step``. Clipping scaled gradients
clips by a norm thousands of times too large, which silently disables clipping.
"""

from __future__ import annotations

import contextlib

import torch

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp8": torch.bfloat16}  # fp8: bf16 around the float8 Linears


class Precision:
    def __init__(self, name: str, device, *, scaler_device: str | None = None, init_scale: float = 2.0**16):
        self.name = name
        self.device_type = device.type
        self.dtype = _DTYPES.get(name)
        # fp16 always gets a scaler; scaler_device lets the tests run the fp16 step order on CPU.
        self.scaler = torch.amp.GradScaler(scaler_device or device.type, init_scale=init_scale) if name == "fp16" else None
        self.skipped_steps = 0

    def autocast(self):
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler else loss).backward()

    def unscale(self, optimizer) -> None:
        if self.scaler:
            self.scaler.unscale_(optimizer)

    def step(self, optimizer) -> bool:
        """Apply the update; False when the fp16 scaler skipped it (overflow), which is not a NaN."""
        if not self.scaler:
            optimizer.step()
            return True
        before = self.scaler.get_scale()
        self.scaler.step(optimizer)
        self.scaler.update()
        stepped = self.scaler.get_scale() >= before
        if not stepped:
            self.skipped_steps += 1
        return stepped

    def state_dict(self) -> dict:
        return {"scaler": self.scaler.state_dict() if self.scaler else None, "skipped_steps": self.skipped_steps}

    def load_state_dict(self, state: dict) -> None:
        if self.scaler and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        self.skipped_steps = int(state.get("skipped_steps", 0))
