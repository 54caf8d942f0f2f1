"""What a person sees and reads back: the live view, progress estimates, run records (runs), log tails, the pinned
terminal lines and TensorFlow's log-level filter (tflog)."""
