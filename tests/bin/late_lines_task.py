"""A stand-in worker whose last lines come after the job is over: it says it trained, waits until the file named by
its argument exists (up to 60 s), then prints its last line and exits 0, as a worker that finishes after the
leader (saving, printing its results) does."""
import os
import sys
import time

print("trained", flush=True)
deadline = time.monotonic() + 60
while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
    time.sleep(0.05)
print("last line: weights_checksum=1.0", flush=True)
