"""What works with what, without importing TensorFlow: the TensorFlow / CUDA / driver tables (:mod:`.tables`),
version arithmetic (:mod:`.versions`) and whether tf-keras is installed (:mod:`.keras`). Used by the doctor,
``lock``, ``docker``, ``setup-gpu``, the launcher and the runtime."""
