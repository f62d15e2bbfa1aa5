"""`TodoWrite`: the model's investigation plan, kept per run.

Writing the plan down makes long investigations converge: the model lists hypotheses to check,
marks them done, and the current plan is echoed back so it stays in the recent context. The
state lives in the tool instance, so build one toolset per run (`default_registry` does).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lestrade.operator.tools.base import ToolOutput, Toolset
from lestrade.operator.tools.common import FunctionTool, Params, ToolInputError

__all__ = ["TodoItem", "TodoState", "todo_toolset", "format_todos"]

_STATUSES = ("pending", "in_progress", "completed")
_MARKS = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]"}


@dataclass
class TodoItem:
    id: str
    content: str
    status: str


@dataclass
class TodoState:
    items: list[TodoItem] = field(default_factory=list)


def format_todos(items: list[TodoItem]) -> str:
    if not items:
        return "Task list is empty."
    done = sum(1 for i in items if i.status == "completed")
    lines = [f"Task list ({done}/{len(items)} completed):"]
    lines += [f"{_MARKS[i.status]} {i.id}. {i.content}" for i in items]
    return "\n".join(lines)


def _items(raw: Any) -> list[TodoItem]:
    if not isinstance(raw, list):
        raise ToolInputError("parameter 'todos' must be a list of {id, content, status}")
    items = []
    for n, entry in enumerate(raw, start=1):
        if not isinstance(entry, dict):
            raise ToolInputError("each todo must be an object with id, content, status")
        content = str(entry.get("content") or "").strip()
        if not content:
            raise ToolInputError(f"todo {n} has no content")
        status = str(entry.get("status") or "pending").strip().lower()
        if status not in _STATUSES:
            raise ToolInputError(f"todo {n} has status '{status}'; use one of {', '.join(_STATUSES)}")
        items.append(TodoItem(id=str(entry.get("id") or n), content=content[:500], status=status))
    return items[:50]


def todo_toolset(state: TodoState | None = None) -> Toolset:
    """A fresh plan per run; pass `state` to read the plan from outside (e.g. to display it)."""
    state = state if state is not None else TodoState()

    async def write(p: Params) -> ToolOutput:
        state.items = _items(p.raw.get("todos"))
        return ToolOutput(status="success", data=format_todos(state.items))

    tool = FunctionTool(
        "TodoWrite",
        "Replace the task list; returns the plan.",
        {
            "type": "object",
            "properties": {
                "todos": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "id": {"type": "string"},
                            "content": {"type": "string"},
                            "status": {"type": "string", "enum": list(_STATUSES)},
                        },
                        "required": ["id", "content", "status"],
                    },
                }
            },
            "required": ["todos"],
        },
        write,
        lambda p: f"update task list ({len(p.raw.get('todos') or [])} items)",
    )
    return Toolset(
        name="todo",
        tools=[tool],
        # The system prompt says this when TodoWrite is offered from the start; when the toolset
        # is deferred, opening it answers with it.
        instructions="Plan with TodoWrite and keep it current (in_progress, completed); answer only when "
        "every item is completed or explained.",
        summary="TodoWrite task list",
        read_only=True,  # the plan lives in the run's memory only: writing it again is harmless
    )
