"""The launch's entry: the only room of ``tfdist.launch`` that knows every other one. It takes a
:class:`~tfdist.launch.options.LaunchOptions` and checks it (:mod:`.checks`), composes what the rooms below run
(:mod:`.compose`), and starts it."""
