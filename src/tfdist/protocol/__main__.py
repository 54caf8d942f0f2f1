"""``python -m tfdist.protocol``: print docs/protocol.md's table of environment variables (regenerate it with this)."""
from tfdist.protocol.variables import render_env_table

print(render_env_table())
