"""The caps on text we read that are not a role's setting, each stated once (docs/limits.md tables
every cap, these and the settings, with what happens past it).

Every text that reaches a regular expression, a diff, a parser or a log line is input: a file set,
Slurm's output, a peer's answer. Each path that reads one is linear in its size and stops at a cap
with a clear answer, never a hang.
"""

from __future__ import annotations

# a string field of a log line (a reason quoting Slurm's words, a diff): past it the field is cut
# and says how much was left out; redaction runs on the kept part only (runtime.redact)
LOG_FIELD_CHARS = 16 * 1024
# an Event's message (a rejection's reason quoting Slurm's words): cut the same way
EVENT_MESSAGE_CHARS = 4 * 1024
# the secret values a Redactor scrubs, counted in characters all together: past it the oldest are
# dropped (config-sync's SecretValues keeps 4,096 values at most, configsync.secretvalues)
KNOWN_SECRET_CHARS = 4 * 1024 * 1024
# the lines between a file's common head and tail that difflib matches line by line (its cost grows
# with their square: 1,000 lines take ~0.2 s); past it those lines are compared line for line by
# position (one hunk, linear), and the diff's note says so (configsync.history)
DIFF_MAX_LINES = 1_000
# a text this long or longer is worked on in a thread, not on the event loop (asyncio.to_thread)
OFF_LOOP_CHARS = 64 * 1024
