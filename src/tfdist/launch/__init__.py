"""Starting and supervising the tasks of a distributed TensorFlow job (see ``tfdist.launch.supervisor``)."""
