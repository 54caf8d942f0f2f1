"""Process mechanics under the launcher: spawning tasks and relaying their output (spawn), reaping orphans (reaper,
orphan_watcher: a separate stdlib-only process), and warm spares (spare_pool: the launcher's side;
spare_process: the spare itself)."""
