"""The flight recorder: when a job hangs (or one task fails while the others wait), collect every task's Python
stacks, last step, process state and last lines of output before anything is killed, and say which task stopped first
and where.

- :mod:`.evidence`: the facts about one task, as data;
- :mod:`.classify` and :mod:`.rules`: pure functions from evidence to a verdict (table-tested);
- :mod:`.stacks` and :mod:`.procfs`: the mechanism that reads another process (py-spy, else faulthandler; /proc);
- :mod:`.collect`: one call that gathers the evidence of every task of an attempt, in parallel;
- :mod:`.report`: the ``hang-*.txt`` and ``hang-*.json`` files under the run folder;
- :mod:`.watch`: the cheap watch on CPU time and output, for tasks that send no heartbeats.
"""
