"""``tfdist doctor``: tell, without importing TensorFlow, whether TF will use the GPU, why not, and the fix.

Layout: :mod:`compat` (version facts from the data files), :mod:`roots` (injectable probe roots),
``probe_*`` modules (facts about this machine), :mod:`checks` (findings), :mod:`recommend`, :mod:`verify`,
:mod:`report` (human and JSON output) and :mod:`core` (runs it all).
"""
