"""One trial: how a config is applied (``apply``), what a batch means (``task``), the run and
its measurement (``runner``, ``measure``, ``failures``), where it runs (``isolation``,
``worker``), and the memory probe built on trials (``probe``)."""
