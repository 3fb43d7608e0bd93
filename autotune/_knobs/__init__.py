"""The knobs: what each knob is (``registry``), the config that holds them (``config``), how
each is applied to a model, loader, optimizer and backends (``apply``), and how each maps to
other trainers' arguments, one knob at a time (``knob_args``) and put together for a whole
config (``trainer_args``). Nothing here imports the trial, search, result or entry-point code."""
