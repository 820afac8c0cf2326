"""Human approval of tool calls: ``agentloop.run`` with an ``on_pause`` callback.

Tools built with ``@tool(requires_approval=True)`` make the loop pause before each
call. ``run`` hands the ``Pause`` to ``on_pause``; its ``Resume`` decides:

- ``Resume({"approved": True})`` runs the call as the model asked;
- ``Resume({"approved": False, "message": "..."})`` gives the call that error result
  (the model reads it and can adapt);
- ``Resume({"approved": True, "arguments": {...}})`` runs it with edited arguments.

Returning ``Cancel(...)`` instead ends the run ``cancelled``. Without ``on_pause`` a
pause cancels the run with a reason that names the missing ``on_pause``.

The model is a ``ScriptedModel`` and the "human" a function, so the example runs
offline and prints the same thing every time: ``python docs/examples/human_approval.py``.
"""

from __future__ import annotations

from agentloop import (
    Cancel,
    Pause,
    Resume,
    ScriptedModel,
    ScriptedResponse,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    run,
    tool,
)

FILES = {"notes.txt": "draft", "passwords.txt": "hunter2", "report.txt": "Q3 numbers"}
OUTBOX: list[tuple[str, str]] = []


@tool
def list_files() -> list[str]:
    """List the files in the workspace."""
    return sorted(FILES)


@tool(requires_approval=True)
def delete_file(path: str) -> str:
    """Delete a file from the workspace."""
    del FILES[path]
    return f"deleted {path}"


@tool(requires_approval=True)
def send_email(to: str, body: str) -> str:
    """Send an email."""
    OUTBOX.append((to, body))
    return f"sent to {to}"


def review(pause: Pause) -> Resume | Cancel:
    """The human in the loop. A real app would ask in a prompt, a form or a chat button."""
    if pause.reason != "approval":  # e.g. "budget_exceeded:turns": stop there
        return Cancel(reason=pause.reason)
    call = pause.payload["call"]
    name, arguments = call["name"], call["arguments"]
    print(f"approve {name}({arguments})?")
    if name == "delete_file" and arguments["path"] == "passwords.txt":
        print("  -> no")
        return Resume({"approved": False, "message": "denied: credentials stay"})
    if name == "send_email":
        edited = {**arguments, "to": "team@example.com"}
        print(f"  -> yes, but to {edited['to']}")
        return Resume({"approved": True, "arguments": edited})
    print("  -> yes")
    return Resume({"approved": True})


def main() -> None:
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls("r1", ToolCall("c1", "list_files", {})),
            ScriptedResponse.tool_calls(
                "r2",
                ToolCall("c2", "delete_file", {"path": "notes.txt"}),
                ToolCall("c3", "delete_file", {"path": "passwords.txt"}),
                ToolCall("c4", "send_email", {"to": "all@example.com", "body": "cleaned up"}),
                text="Cleaning up and telling everyone.",
            ),
            ScriptedResponse.text("r3", "Deleted notes.txt; passwords.txt was kept."),
        ]
    )
    result = run(
        [UserMessage("u1", "Clean up the workspace and tell the team.")],
        model=model,
        tools=[list_files, delete_file, send_email],
        on_pause=review,
    )
    model.assert_complete()
    print()
    for message in result.messages:
        if type(message) is ToolResultMessage:
            flag = "error" if message.is_error else "ok"
            print(f"{message.tool_call_id} {message.tool_name}: [{flag}] {message.content}")
    print()
    print(f"status={result.status} reason={result.reason} steps={result.steps}")
    print(f"final: {result.final_text}")
    print(f"files left: {sorted(FILES)}")
    print(f"outbox: {OUTBOX}")


if __name__ == "__main__":
    main()
