"""Run a session into the log file PATH; if PATH exists, finish the session it holds."""

import os
import sys

from adder_agent import model, tools

import replay
from agentloop import UserMessage, agent_loop, drive

path = sys.argv[1]
if os.path.exists(path):  # an earlier process started it (and died): rebuild its loop
    loop, _ = replay.resume(replay.read_log(path))
else:
    loop = agent_loop([UserMessage("u1", "What is 1 + 2 + 3?")], tools=tools)
with replay.LogWriter(path) as writer:
    writer.follow(loop.log)  # appends to the same file
    print(drive(loop, model=model, tools=tools).final_text)
