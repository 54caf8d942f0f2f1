"""What a task and the launcher expose to the outside: the ``/metrics`` + ``/healthz`` HTTP server
(:mod:`.server`), the health policy behind ``/healthz`` (:mod:`.health`) and the labels every series carries
(:mod:`.labels`). Imports no TensorFlow."""
