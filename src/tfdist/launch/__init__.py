"""Starting and supervising the tasks of a distributed TensorFlow job (see ``tfdist.launch.local.supervisor``)."""
