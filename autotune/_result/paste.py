"""The few lines to paste to train as a result's answer does: in a plain PyTorch loop, a
Lightning ``Trainer`` or a Hugging Face ``Trainer`` (``autotune show best.json --as KIND``).

Each snippet reads the config from the JSON (``autotune.load_config``), so it stays right when
the file is replaced, and names in comments the values that config sets, computed by the same
methods the snippet calls: what the reader sees is what the code applies.
"""

from __future__ import annotations

from typing import Any

from autotune._errors import ConfigError
from autotune._knobs.config import TrainingConfig

__all__ = ["KINDS", "snippet"]

KINDS = ("loop", "lightning", "transformers")


def snippet(data: dict[str, Any], kind: str, path: str = "best.json") -> str:
    """The lines to paste for ``kind`` (one of :data:`KINDS`) to train as the result ``data``
    (a result JSON, read from ``path``) answers."""
    if kind not in KINDS:
        raise ConfigError(f"--as must be one of {', '.join(KINDS)}, but got {kind!r}.")
    cfg = TrainingConfig.from_dict(data["config"])
    if kind == "transformers":
        return _transformers(cfg, path)
    if kind == "lightning":
        return _lightning(cfg, path)
    return _loop(cfg, path)


def _loop(cfg: TrainingConfig, path: str) -> str:
    k = cfg.gradient_accumulation_steps
    backward = f"scaler.scale(loss / {k}).backward()" if k > 1 else "scaler.scale(loss).backward()"
    return "\n".join(
        [
            "import autotune",
            "",
            f'cfg = autotune.load_config("{path}")  # {cfg.describe()}',
            "model = cfg.prepare(model)  # device, memory format, checkpointing, compile",
            "loader = cfg.dataloader(train_dataset)  # batch size, workers, pinning, prefetch",
            "optimizer = cfg.optimizer(model.parameters())  # AdamW, the searched LR and kind",
            "steps = cfg.optimizer_steps(len(loader) * epochs)",
            "scheduler = cfg.lr_scheduler(optimizer, total_steps=steps)",
            "scaler = cfg.grad_scaler()  # enabled for fp16 only",
            "with cfg.backends():  # threads, cuDNN benchmark, TF32",
            "    for epoch in range(epochs):",
            "        for i, batch in enumerate(loader, 1):",
            "            inputs, targets = cfg.to_device(batch)",
            "            with cfg.autocast():  # the searched precision",
            "                loss = loss_fn(model(inputs), targets)",
            f"            {backward}",
            *_optimizer_step_lines(k),
        ]
    )


def _optimizer_step_lines(k: int) -> list[str]:
    indent = "            "
    body = [
        "scaler.step(optimizer)",
        "scaler.update()",
        "optimizer.zero_grad(set_to_none=True)",
        "scheduler.step()",
    ]
    if k == 1:
        return [indent + line for line in body]
    return [f"{indent}if i % {k} == 0:", *(indent + "    " + line for line in body)]


def _lightning(cfg: TrainingConfig, path: str) -> str:
    settings = cfg.to_lightning()
    lines = [
        "import autotune",
        "import lightning",
        "from torch.utils.data import DataLoader",
        "",
        f'cfg = autotune.load_config("{path}")  # {cfg.describe()}',
        "settings = cfg.to_lightning()",
        f"# Trainer: {_kwargs(settings.trainer)}",
        "trainer = lightning.pytorch.Trainer(max_epochs=epochs, **settings.trainer)",
        f"# DataLoader: {_kwargs(settings.dataloader)}",
        "loader = DataLoader(train_dataset, shuffle=True, **settings.dataloader)",
        "model = cfg.prepare(model)  # memory format, checkpointing, compile",
        "with cfg.backends():  # threads, cuDNN benchmark, TF32",
        "    trainer.fit(model, loader)",
    ]
    return "\n".join([*lines, *(f"# {note}" for note in settings.notes)])


def _transformers(cfg: TrainingConfig, path: str) -> str:
    return "\n".join(
        [
            "import autotune",
            "from transformers import Trainer, TrainingArguments",
            "",
            f'cfg = autotune.load_config("{path}")  # {cfg.describe()}',
            f"# TrainingArguments: {_kwargs(cfg.to_transformers())}",
            "# (over a stream: cfg.to_transformers(planned_samples=N) sets max_steps)",
            'args = TrainingArguments(output_dir="out", **cfg.to_transformers())',
            "trainer = Trainer(model=cfg.prepare(model), args=args, train_dataset=train_dataset)",
            "with cfg.backends():  # threads, cuDNN benchmark (not TrainingArguments fields)",
            "    trainer.train()",
        ]
    )


def _kwargs(values: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in values.items()) or "(none)"
