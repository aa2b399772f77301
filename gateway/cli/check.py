"""`chatgate approvals check COMMAND`: the command classifier's verdict, as JSON. It reads no
configuration and opens nothing: a script may ask about thousands of commands."""

from __future__ import annotations

import argparse
import json


def check(args: argparse.Namespace) -> int:
    from agent.safety.classifier import classify

    print(json.dumps(classify(args.shell_command).as_dict()))
    return 0
