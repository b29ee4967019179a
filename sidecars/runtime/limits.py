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
# a peer's HTTP answer the worker agent, the drain hook, the exec probe and the control plane's
# config feed read (runtime.answers): past it it is not read further and counts as no answer. The
# largest is config-sync's history for the feed (its diffs: 20 generations of 16 KiB per file)
PEER_ANSWER_BYTES = 16 * 1024 * 1024
# what we read from a child process (a Slurm command's output: stdout and stderr together): past it
# the child's whole process group is killed and reaped, and the caller gets an error naming the
# command and this cap (runtime.process.OutputTooLarge). Slurm's largest answer we ask for, every
# job as JSON (`scontrol show job --json`, 22.05's `squeue --json`), is ~9.4 KB a job on 26.05
# (~8.7 KB on 24.11, 3.6 KB on 22.05): ~94 MB at 10,000 jobs. `scontrol -o -d show node` is ~650 B
# a node, its JSON ~2.8 KB (2.8 MB at 1,000 nodes). 256 MiB leaves 2.8x room above the jobs.
CHILD_OUTPUT_BYTES = 256 * 1024 * 1024
