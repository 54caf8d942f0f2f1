"""The command line: thin modules, one per command. None of them imports TensorFlow."""
