"""The tuned config in a plain PyTorch loop: autotune.train applies every knob.

    python examples/plain_loop.py [best.json]

autotune.train is the loop the search measured with: DataLoader batch size / workers /
pinning, device, channels_last, checkpointing, torch.compile, autocast (+ GradScaler for fp16),
cuDNN benchmark / TF32 / threads, gradient accumulation, the optimizer implementation
(foreach/fused), and the LR schedule over all epochs. Your own loop can do the
same through the config's methods (see the README's "A plain loop").
"""

from __future__ import annotations

import autotune
from autotune.examples import tiny_model

from _shared import EPOCHS, config_from_argv, datasets


def main() -> None:
    cfg = config_from_argv()
    train, val = datasets()
    report = autotune.train(tiny_model(), train, cfg, epochs=EPOCHS, val_dataset=val)
    print(report.summary())
    print(f"val accuracy: {report.val_metric:.4f}")


if __name__ == "__main__":
    main()
